//! The buyer's receipt for a paid checkout (see `orders`): an email sent
//! once per order, whichever events and sources report its payment.
// needs: stripe, demos

use webhook_engine::outbox::{Email, SideEffect};

use super::orders::CheckoutSession;

/// The receipt for a paid checkout; none without an email. Keyed by the
/// checkout session, so one purchase sends one receipt whichever events and
/// sources report it.
pub fn receipt(session: &CheckoutSession) -> Option<SideEffect> {
    let to = session.email()?.to_string();
    let amount = match (session.amount_total, &session.currency) {
        (Some(minor), Some(currency)) => format!(" of {}", format_amount(minor, currency)),
        _ => String::new(),
    };
    let text = format!(
        "Thank you! We received your payment{amount} (order {}).",
        session.id
    );
    let email = Email::new(to, "Your receipt", text);
    Some(email.send().about("checkout_session", &session.id))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_names_the_amount_and_order() {
        let body = r#"{"created":1,"data":{"object":{"id":"cs_1","amount_total":4205,"currency":"eur",
            "customer_details":{"email":"a@b.c"}}}}"#;
        let side_effect = receipt(&CheckoutSession::from_event(body).unwrap()).unwrap();
        let email: Email = serde_json::from_str(side_effect.payload()).unwrap();
        assert_eq!(email.to, "a@b.c");
        assert_eq!(
            email.text,
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
        assert!(receipt(&CheckoutSession::from_event(body).unwrap()).is_none());
    }
}
