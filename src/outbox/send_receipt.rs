//! `send_receipt`: after a paid checkout, email the buyer a receipt through a
//! Resend-style API: `POST {EMAIL_API_URL}/emails`, bearer `EMAIL_API_KEY`.

use serde::{Deserialize, Serialize};

use super::{post_json, unconfigured, Action, Call, Performed, SideEffect};
use crate::config;
use crate::effects::orders::CheckoutSession;

/// What the row stores, and the performer reads back.
#[derive(Serialize, Deserialize)]
struct Receipt {
    to: String,
    subject: String,
    text: String,
}

/// The receipt for a paid checkout; none without an email. Keyed by the
/// checkout session, so one purchase sends one receipt whichever events and
/// sources report it.
pub fn intent(session: &CheckoutSession) -> Option<SideEffect> {
    let to = session.email()?.to_string();
    let amount = match (session.amount_total, &session.currency) {
        (Some(minor), Some(currency)) => format!(" of {}", format_amount(minor, currency)),
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
    Some(SideEffect::new(Action::SendReceipt, &receipt).about("checkout_session", &session.id))
}

/// An amount in minor units, written with its currency's exponent: JPY has
/// no minor unit, KWD has three decimals, most have two (Stripe's lists of
/// zero- and three-decimal currencies).
fn format_amount(minor: i64, currency: &str) -> String {
    const ZERO_DECIMAL: [&str; 16] = [
        "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV",
        "XAF", "XOF", "XPF",
    ];
    const THREE_DECIMAL: [&str; 5] = ["BHD", "JOD", "KWD", "OMR", "TND"];
    let code = currency.to_ascii_uppercase();
    let exponent = if ZERO_DECIMAL.contains(&code.as_str()) {
        0
    } else if THREE_DECIMAL.contains(&code.as_str()) {
        3
    } else {
        2
    };
    let sign = if minor < 0 { "-" } else { "" };
    let minor = minor.unsigned_abs();
    if exponent == 0 {
        return format!("{sign}{minor} {code}");
    }
    let unit = 10u64.pow(exponent);
    let width = exponent as usize;
    format!("{sign}{}.{:0width$} {code}", minor / unit, minor % unit)
}

pub async fn perform(payload: &str, call: &Call<'_>) -> Result<Performed, String> {
    let env = call.env;
    let Some(api) = config::optional(env, "EMAIL_API_URL") else {
        return unconfigured(env, "EMAIL_API_URL is not set");
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
    post_json(&url, &body, call, bearer.as_deref()).await?;
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
        assert_eq!(side_effect.action, Action::SendReceipt);
        let receipt: Receipt = serde_json::from_str(&side_effect.payload).unwrap();
        assert_eq!(receipt.to, "a@b.c");
        assert_eq!(
            receipt.text,
            "Thank you! We received your payment of 42.05 EUR (order cs_1)."
        );
    }

    #[test]
    fn amounts_use_the_currencys_exponent() {
        assert_eq!(format_amount(4205, "usd"), "42.05 USD");
        assert_eq!(format_amount(500, "jpy"), "500 JPY");
        assert_eq!(format_amount(1234, "kwd"), "1.234 KWD");
        assert_eq!(format_amount(5, "eur"), "0.05 EUR");
        assert_eq!(format_amount(-150, "eur"), "-1.50 EUR");
        assert_eq!(format_amount(7, "bhd"), "0.007 BHD");
    }

    #[test]
    fn no_email_no_receipt() {
        let body = r#"{"created":1,"data":{"object":{"id":"cs_1"}}}"#;
        assert!(intent(&CheckoutSession::from_event(body).unwrap()).is_none());
    }
}
