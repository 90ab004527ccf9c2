//! `call_http`: a JSON POST to an API of your own (a CRM, a fulfilment
//! service): `POST {<the target variable>}` with the body, under the row's
//! `Idempotency-Key`. The row stores the name of the variable that holds the
//! URL, never the URL: a URL often carries a token, and rows are shown to
//! operators.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{post_json, unconfigured, Action, Call, CallError, Performed, SideEffect};
use crate::config;

/// A POST of `body` to the URL in the variable (or secret) `target`. Made
/// only by [`HttpCall::new`], so that where a call goes is a constant.
#[derive(Debug, Serialize, Deserialize)]
pub struct HttpCall {
    /// The variable holding the URL: a name of A-Z, 0-9 and `_` that ends in
    /// `_URL`, and none of the worker's own targets (`ALERT_URL`, …).
    target: String,
    /// What is posted, as it will be sent.
    body: Box<RawValue>,
}

impl HttpCall {
    /// A call of `target` with `body` as JSON. `target` is a constant: an
    /// event's data never picks where a call goes.
    ///
    /// As with every payload, a body serde_json cannot write (a map whose
    /// keys are not strings) is a bug in the effect, and panics in its tests.
    pub fn new(target: &'static str, body: &impl Serialize) -> Self {
        let json = serde_json::to_string(body).expect("the body serializes");
        HttpCall {
            target: target.into(),
            body: RawValue::from_string(json).expect("serde_json writes JSON"),
        }
    }

    /// The side effect that makes the call once, keyed by the event and
    /// the target: one event may call several APIs, each once.
    pub fn post(&self) -> SideEffect {
        let mut side_effect = SideEffect::new(Action::CallHttp, self);
        side_effect.target = Some(self.target.clone());
        side_effect
    }
}

/// The worker's own targets: an effect's call never posts to them (it could
/// pass for an operators' alert).
const RESERVED: &[&str] = &["ALERT_URL", "NOTIFY_URL", "EMAIL_API_URL"];

/// Whether `target` names a variable of yours holding a URL: A-Z, 0-9 and
/// `_`, ending in `_URL`, and not one of the worker's own. Never a URL or
/// a secret itself, nor a secret that is not a URL.
fn target_is_yours(target: &str) -> bool {
    let is_name = |b: u8| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_';
    target.len() > "_URL".len()
        && target.ends_with("_URL")
        && target.bytes().all(is_name)
        && !RESERVED.contains(&target)
}

pub async fn perform(payload: &str, call: &Call<'_>) -> Result<Performed, CallError> {
    let http_call: HttpCall = serde_json::from_str(payload).map_err(|_| CallError::Unreadable)?;
    if !target_is_yours(&http_call.target) {
        return Err(CallError::Unreadable);
    }
    let Some(url) = config::optional(call.env, &http_call.target) else {
        return unconfigured(call, &http_call.target);
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
        assert_eq!(side_effect.action, Action::CallHttp.name());
        assert_eq!(
            side_effect.payload,
            r#"{"target":"CRM_URL","body":{"email":"a@example.com"}}"#
        );
        let read: HttpCall = serde_json::from_str(&side_effect.payload).unwrap();
        assert_eq!(read.body.get(), r#"{"email":"a@example.com"}"#);
        assert_eq!(side_effect.target.as_deref(), Some("CRM_URL"));
    }

    #[test]
    fn one_event_calls_each_target_once_under_its_own_key() {
        let event = crate::effects::tests::event("example", "ping", "{}");
        let key = |target| crate::outbox::insert(&event, HttpCall::new(target, &()).post(), 1).1;
        assert_eq!(key("CRM_URL"), key("CRM_URL"));
        assert_ne!(key("CRM_URL"), key("FULFILMENT_URL"));
    }

    #[test]
    fn only_a_url_variable_of_yours_is_a_target() {
        for yours in ["CRM_URL", "FULFILMENT_2_URL"] {
            assert!(target_is_yours(yours), "{yours}");
        }
        for not in [
            "",
            "_URL",
            "crm_url",
            "CRM",
            "ADMIN_TOKEN",
            "STRIPE_WEBHOOK_SECRET",
            "ALERT_URL",
            "NOTIFY_URL",
            "EMAIL_API_URL",
            "http://x.test/_URL",
        ] {
            assert!(!target_is_yours(not), "{not}");
        }
    }
}
