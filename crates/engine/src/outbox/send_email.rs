//! `send_email`: an email through a Resend-style API:
//! `POST {EMAIL_API_URL}/emails`, bearer `EMAIL_API_KEY`, from `EMAIL_FROM`.

use serde::{Deserialize, Serialize};

use super::{post_json, unconfigured, Action, Call, CallError, Performed, SideEffect};
use crate::config;

/// An email to send: what an effect writes ([`Email::new`]), and what the
/// row stores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Email {
    /// The recipient's address.
    pub to: String,
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub text: String,
}

impl Email {
    /// A plain-text email to `to`.
    pub fn new(to: impl Into<String>, subject: impl Into<String>, text: impl Into<String>) -> Self {
        Email {
            to: to.into(),
            subject: subject.into(),
            text: text.into(),
        }
    }

    /// The side effect that sends it once, keyed by the event (or, with
    /// [`SideEffect::about`], by a business object).
    pub fn send(&self) -> SideEffect {
        SideEffect::new(Action::SendEmail, self)
    }
}

pub async fn perform(payload: &str, call: &Call<'_>) -> Result<Performed, CallError> {
    let env = call.env;
    let Some(api) = config::optional(env, "EMAIL_API_URL") else {
        return unconfigured(call, "EMAIL_API_URL");
    };
    let email: Email = serde_json::from_str(payload).map_err(|_| CallError::Unreadable)?;
    #[derive(Serialize)]
    struct Request<'a> {
        from: &'a str,
        to: [&'a str; 1],
        subject: &'a str,
        text: &'a str,
    }
    let from = config::optional(env, "EMAIL_FROM");
    let request = Request {
        from: from.as_deref().unwrap_or("noreply@example.com"),
        to: [&email.to],
        subject: &email.subject,
        text: &email.text,
    };
    // Strings only: serialization cannot fail.
    let body = serde_json::to_string(&request).expect("email serializes");
    let bearer = config::optional(env, "EMAIL_API_KEY");
    let url = format!("{}/emails", api.trim_end_matches('/'));
    post_json(&url, &body, call, bearer.as_deref()).await?;
    Ok(Performed::Sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_is_stored_as_its_fields() {
        let email = Email::new("a@b.c", "Hi", "Hello");
        let side_effect = email.send();
        assert_eq!(side_effect.action, Action::SendEmail.name());
        assert_eq!(
            side_effect.payload,
            r#"{"to":"a@b.c","subject":"Hi","text":"Hello"}"#
        );
    }
}
