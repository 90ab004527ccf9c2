//! `send_receipt`: after a paid checkout, email the buyer a receipt through a
//! Resend-style API: `POST {EMAIL_API_URL}/emails`, bearer `EMAIL_API_KEY`.

use serde::{Deserialize, Serialize};
use worker::Env;

use super::{post_json, Performed, SideEffect};
use crate::config;
use crate::effects::orders::CheckoutSession;

pub const ACTION: &str = "send_receipt";

/// What the row stores, and the performer reads back.
#[derive(Serialize, Deserialize)]
struct Receipt {
    to: String,
    subject: String,
    text: String,
}

/// The receipt for a paid checkout; none without an email.
pub fn intent(session: &CheckoutSession) -> Option<SideEffect> {
    let to = session.email()?.to_string();
    let amount = match (session.amount_total, &session.currency) {
        (Some(minor), Some(currency)) => format!(
            " of {}.{:02} {}",
            minor / 100,
            minor % 100,
            currency.to_ascii_uppercase()
        ),
        _ => String::new(),
    };
    let receipt = Receipt {
        to,
        subject: "Your receipt".into(),
        text: format!(
            "Thank you! We received your payment{amount} (order {}).",
            session.id
        ),
    };
    Some(SideEffect::new(ACTION, &receipt))
}

pub async fn perform(payload: &str, key: &str, env: &Env) -> Result<Performed, String> {
    let Some(api) = config::optional(env, "EMAIL_API_URL") else {
        return Ok(Performed::Skipped("EMAIL_API_URL is not set"));
    };
    let receipt: Receipt =
        serde_json::from_str(payload).map_err(|_| "unreadable receipt payload".to_string())?;
    #[derive(Serialize)]
    struct Email<'a> {
        from: &'a str,
        to: [&'a str; 1],
        subject: &'a str,
        text: &'a str,
    }
    let from = config::optional(env, "EMAIL_FROM");
    let email = Email {
        from: from.as_deref().unwrap_or("receipts@example.com"),
        to: [&receipt.to],
        subject: &receipt.subject,
        text: &receipt.text,
    };
    let body = serde_json::to_string(&email).map_err(|_| "unencodable email".to_string())?;
    let bearer = config::optional(env, "EMAIL_API_KEY");
    let url = format!("{}/emails", api.trim_end_matches('/'));
    post_json(&url, &body, key, bearer.as_deref()).await?;
    Ok(Performed::Sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_names_the_amount_and_order() {
        let body = r#"{"created":1,"data":{"object":{"id":"cs_1","amount_total":4205,"currency":"eur",
            "customer_details":{"email":"a@b.c"}}}}"#;
        let side_effect = intent(&CheckoutSession::from_event(body).unwrap()).unwrap();
        assert_eq!(side_effect.action, ACTION);
        let receipt: Receipt = serde_json::from_str(&side_effect.payload).unwrap();
        assert_eq!(receipt.to, "a@b.c");
        assert_eq!(
            receipt.text,
            "Thank you! We received your payment of 42.05 EUR (order cs_1)."
        );
    }

    #[test]
    fn no_email_no_receipt() {
        let body = r#"{"created":1,"data":{"object":{"id":"cs_1"}}}"#;
        assert!(intent(&CheckoutSession::from_event(body).unwrap()).is_none());
    }
}
