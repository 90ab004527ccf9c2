//! Stripe checkout → `orders`, keyed by the Checkout Session id.
//!
//! One purchase produces two events (`checkout.session.completed` and
//! `payment_intent.succeeded`) with different event ids, so the ledger alone
//! cannot stop a second order: the effect itself is keyed on the order's own
//! id. Only the checkout event creates an order; the payment event can only
//! mark an existing one paid.

use serde::Deserialize;

use super::{parse, PlanError, Statement, StripeEvent};

/// The parts of a Checkout Session the order and the receipt need.
#[derive(Deserialize)]
pub struct CheckoutSession {
    pub id: String,
    pub amount_total: Option<i64>,
    pub currency: Option<String>,
    pub customer_details: Option<CustomerDetails>,
    pub payment_intent: Option<String>,
}

#[derive(Deserialize)]
pub struct CustomerDetails {
    pub email: Option<String>,
}

impl CheckoutSession {
    /// Reads `data.object` of a `checkout.session.completed`.
    pub fn from_event(body: &str) -> Result<Self, PlanError> {
        let event: StripeEvent<CheckoutSession> = parse(body)?;
        Ok(event.data.object)
    }

    pub fn email(&self) -> Option<&str> {
        self.customer_details.as_ref()?.email.as_deref()
    }
}

#[derive(Deserialize)]
struct PaymentIntent {
    id: String,
}

const UPSERT_PAID_ORDER: &str = "INSERT INTO orders \
     (checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at) \
     VALUES (?1, ?2, 'paid', ?3, ?4, ?5, ?6, ?6) \
     ON CONFLICT (checkout_session_id) DO UPDATE SET \
       status = 'paid', \
       payment_intent_id = COALESCE(excluded.payment_intent_id, orders.payment_intent_id), \
       amount = excluded.amount, currency = excluded.currency, \
       customer_email = excluded.customer_email, updated_at = excluded.updated_at";

const MARK_PAID_BY_INTENT: &str = "UPDATE orders SET status = 'paid', updated_at = ?2 \
     WHERE payment_intent_id = ?1 AND status <> 'paid'";

pub fn checkout_completed(session: &CheckoutSession, now: i64) -> Vec<Statement> {
    vec![Statement {
        sql: UPSERT_PAID_ORDER,
        params: vec![
            session.id.as_str().into(),
            session.payment_intent.as_deref().into(),
            session.amount_total.into(),
            session.currency.as_deref().into(),
            session.email().into(),
            now.into(),
        ],
    }]
}

pub fn payment_succeeded(body: &str, now: i64) -> Result<Vec<Statement>, PlanError> {
    let event: StripeEvent<PaymentIntent> = parse(body)?;
    Ok(vec![Statement {
        sql: MARK_PAID_BY_INTENT,
        params: vec![event.data.object.id.into(), now.into()],
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::Value;

    #[test]
    fn checkout_upserts_the_order_by_session_id() {
        let body = r#"{"id":"evt_1","created":5,"data":{"object":{"id":"cs_1","amount_total":2000,
            "currency":"eur","customer_details":{"email":"a@b.c"},"payment_intent":"pi_1"}}}"#;
        let plan = checkout_completed(&CheckoutSession::from_event(body).unwrap(), 9);
        assert_eq!(plan[0].sql, UPSERT_PAID_ORDER);
        assert_eq!(
            plan[0].params,
            vec![
                "cs_1".into(),
                "pi_1".into(),
                Value::Int(2000),
                "eur".into(),
                "a@b.c".into(),
                Value::Int(9)
            ]
        );
    }

    #[test]
    fn optional_fields_become_null() {
        let body = r#"{"created":5,"data":{"object":{"id":"cs_1"}}}"#;
        let plan = checkout_completed(&CheckoutSession::from_event(body).unwrap(), 9);
        assert_eq!(plan[0].params[1], Value::Null);
        assert_eq!(plan[0].params[4], Value::Null);
    }

    #[test]
    fn payment_only_updates_an_existing_order() {
        let body = r#"{"created":5,"data":{"object":{"id":"pi_1"}}}"#;
        let plan = payment_succeeded(body, 9).unwrap();
        assert!(plan[0].sql.starts_with("UPDATE orders"));
        assert_eq!(plan[0].params, vec!["pi_1".into(), Value::Int(9)]);
    }

    #[test]
    fn a_session_without_id_is_a_plan_error() {
        assert!(CheckoutSession::from_event(r#"{"created":5,"data":{"object":{}}}"#).is_err());
    }
}
