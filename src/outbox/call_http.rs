//! `call_http`: a JSON POST to an API of your own (a CRM, a fulfilment
//! service): `POST {<the target variable>}` with the body, under the row's
//! `Idempotency-Key`. The row stores the name of the variable that holds the
//! URL, never the URL: a URL often carries a token, and rows are shown to
//! operators.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{post_json, unconfigured, Action, Call, CallError, Performed, SideEffect};
use crate::config;

/// A POST of `body` to the URL in the variable (or secret) `target`.
#[derive(Debug, Serialize, Deserialize)]
pub struct HttpCall {
    /// The variable holding the URL, e.g. `CRM_URL` (A-Z, 0-9 and `_`).
    pub target: String,
    /// What is posted, as it will be sent.
    pub body: Box<RawValue>,
}

impl HttpCall {
    /// A call of `target` with `body` as JSON. As with every payload, a
    /// body serde_json cannot write (a map with keys that are not strings)
    /// is a bug in the effect, and panics in its tests.
    pub fn new(target: &str, body: &impl Serialize) -> Self {
        let json = serde_json::to_string(body).expect("the body serializes");
        HttpCall {
            target: target.into(),
            body: RawValue::from_string(json).expect("serde_json writes JSON"),
        }
    }

    /// The side effect that makes the call once, keyed by the event.
    pub fn post(&self) -> SideEffect {
        SideEffect::new(Action::CallHttp, self)
    }
}

pub async fn perform(payload: &str, call: &Call<'_>) -> Result<Performed, CallError> {
    let http_call: HttpCall = serde_json::from_str(payload).map_err(|_| CallError::Unreadable)?;
    // The name of a variable, never a URL or a secret itself.
    let is_name = |b: u8| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_';
    if http_call.target.is_empty() || !http_call.target.bytes().all(is_name) {
        return Err(CallError::Unreadable);
    }
    let Some(url) = config::optional(call.env, &http_call.target) else {
        return unconfigured(call.env, "the call's target variable is not set");
    };
    post_json(&url, http_call.body.get(), call, None).await?;
    Ok(Performed::Sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_stores_its_target_by_name_and_its_body_as_sent() {
        #[derive(Serialize)]
        struct Lead<'a> {
            email: &'a str,
        }
        let call = HttpCall::new(
            "CRM_URL",
            &Lead {
                email: "a@example.com",
            },
        );
        let side_effect = call.post();
        assert_eq!(side_effect.action, Action::CallHttp);
        assert_eq!(
            side_effect.payload,
            r#"{"target":"CRM_URL","body":{"email":"a@example.com"}}"#
        );
        let read: HttpCall = serde_json::from_str(&side_effect.payload).unwrap();
        assert_eq!(read.body.get(), r#"{"email":"a@example.com"}"#);
    }
}
