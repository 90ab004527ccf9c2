//! Stripe checkout → `orders`, keyed by the Checkout Session id.
//!
//! One purchase produces several events (`checkout.session.completed`,
//! `payment_intent.succeeded`, and for delayed payment methods
//! `checkout.session.async_payment_succeeded` or `…_failed`) with different
//! event ids, so the ledger alone cannot stop a second order: the effect
//! itself is keyed on the order's own id.
//!
//! A completed checkout is not always a paid one: with a delayed payment
//! method (a bank debit) it completes `unpaid`, and the money arrives — or
//! does not — days later in an `async_payment_*` event. So an order is
//! `paid` only when Stripe says `payment_status: "paid"`; otherwise it waits
//! as `awaiting_payment`, and a later failure makes it `payment_failed`.
//! Events may arrive in any order, and a failed one may be applied days
//! later: no update moves a `paid` order back, and a late `completed`
//! (unpaid) does not move a `payment_failed` one back to waiting.
// needs: stripe, demos

use serde::Deserialize;

use webhook_engine::effects::{parse, Effect, PlanError, Statement, StripeEvent};
use webhook_engine::event::VerifiedEvent;

use super::receipts::receipt;

/// `checkout.session.completed`: the order, paid or awaiting payment.
pub fn completed(event: &VerifiedEvent, now: i64) -> Result<Effect, PlanError> {
    on_checkout(event, now, CheckoutOutcome::Completed)
}

/// `checkout.session.async_payment_succeeded`: the delayed payment came.
pub fn async_succeeded(event: &VerifiedEvent, now: i64) -> Result<Effect, PlanError> {
    on_checkout(event, now, CheckoutOutcome::AsyncSucceeded)
}

/// `checkout.session.async_payment_failed`: it did not.
pub fn async_failed(event: &VerifiedEvent, now: i64) -> Result<Effect, PlanError> {
    on_checkout(event, now, CheckoutOutcome::AsyncFailed)
}

/// The order's row, and the buyer's receipt once the money is in.
fn on_checkout(
    event: &VerifiedEvent,
    now: i64,
    outcome: CheckoutOutcome,
) -> Result<Effect, PlanError> {
    let session = CheckoutSession::from_event(&event.body)?;
    let receipt = outcome
        .receipt_due(&session)
        .then(|| receipt(&session))
        .flatten();
    Ok(Effect::new(checkout(&session, outcome, now)).with(receipt))
}

/// `payment_intent.succeeded`: the order it paid for is paid.
pub fn payment_succeeded(event: &VerifiedEvent, now: i64) -> Result<Effect, PlanError> {
    let intent: StripeEvent<PaymentIntent> = parse(&event.body)?;
    Ok(Effect::new(mark_paid(&intent.data.object.id, now)))
}

/// The parts of a Checkout Session the order and the receipt need.
#[derive(Deserialize)]
pub struct CheckoutSession {
    pub id: String,
    pub amount_total: Option<i64>,
    pub currency: Option<String>,
    pub customer_details: Option<CustomerDetails>,
    pub payment_intent: Option<String>,
    /// `paid`, `unpaid` (a delayed payment method) or `no_payment_required`.
    pub payment_status: Option<String>,
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

    /// Whether Stripe says the money is in.
    pub fn is_paid(&self) -> bool {
        self.payment_status.as_deref() == Some("paid")
    }
}

#[derive(Deserialize)]
struct PaymentIntent {
    id: String,
}

/// Records the order in `status` (?7), never moving it back: `paid` stays,
/// and `payment_failed` does not return to `awaiting_payment`.
const UPSERT_ORDER: &str = "INSERT INTO orders \
     (checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at) \
     VALUES (?1, ?2, ?7, ?3, ?4, ?5, ?6, ?6) \
     ON CONFLICT (checkout_session_id) DO UPDATE SET \
       status = CASE \
         WHEN orders.status = 'paid' THEN 'paid' \
         WHEN orders.status = 'payment_failed' AND excluded.status = 'awaiting_payment' \
           THEN 'payment_failed' \
         ELSE excluded.status END, \
       payment_intent_id = COALESCE(excluded.payment_intent_id, orders.payment_intent_id), \
       amount = excluded.amount, currency = excluded.currency, \
       customer_email = excluded.customer_email, updated_at = excluded.updated_at";

const MARK_PAID_BY_INTENT: &str = "UPDATE orders SET status = 'paid', updated_at = ?2 \
     WHERE payment_intent_id = ?1 AND status <> 'paid'";

/// What a checkout event says of its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckoutOutcome {
    /// `checkout.session.completed`: paid, or awaiting a delayed payment.
    Completed,
    /// `checkout.session.async_payment_succeeded`: the delayed payment came.
    AsyncSucceeded,
    /// `checkout.session.async_payment_failed`: it did not.
    AsyncFailed,
}

impl CheckoutOutcome {
    /// The order's status after this event (a `paid` order stays paid).
    fn status(self, session: &CheckoutSession) -> &'static str {
        match self {
            CheckoutOutcome::Completed if session.is_paid() => "paid",
            CheckoutOutcome::Completed
                if session.payment_status.as_deref() == Some("no_payment_required") =>
            {
                "complete"
            }
            CheckoutOutcome::Completed => "awaiting_payment",
            CheckoutOutcome::AsyncSucceeded => "paid",
            CheckoutOutcome::AsyncFailed => "payment_failed",
        }
    }

    /// Whether the buyer gets a receipt: only when the money is in.
    pub fn receipt_due(self, session: &CheckoutSession) -> bool {
        self.status(session) == "paid"
    }
}

pub fn checkout(session: &CheckoutSession, outcome: CheckoutOutcome, now: i64) -> Vec<Statement> {
    vec![Statement::new(
        UPSERT_ORDER,
        vec![
            session.id.as_str().into(),
            session.payment_intent.as_deref().into(),
            session.amount_total.into(),
            session.currency.as_deref().into(),
            session.email().into(),
            now.into(),
            outcome.status(session).into(),
        ],
    )]
}

fn mark_paid(payment_intent: &str, now: i64) -> Vec<Statement> {
    vec![Statement::new(
        MARK_PAID_BY_INTENT,
        vec![payment_intent.into(), now.into()],
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::EFFECTS;
    use webhook_engine::effects::Value;
    use webhook_engine::effects::{plan_with, Plan};
    use webhook_engine::event::VerifiedEvent;
    use webhook_engine::testing::{self, row, Applied, TestDb};

    /// The batch the engine commits for `event` with the app's effects.
    fn plan(event: &VerifiedEvent, now: i64) -> Result<Plan, PlanError> {
        plan_with(crate::effects::EFFECTS, event, now)
    }

    /// A checkout event as Stripe sends it.
    fn checkout_event(id: &str, kind: &str, payment_status: &str) -> VerifiedEvent {
        let body = format!(
            r#"{{"id":"{id}","type":"checkout.session.{kind}","created":5,"data":{{"object":{{
            "id":"cs_1","amount_total":2000,"currency":"eur","customer_details":{{"email":"a@b.c"}},
            "payment_intent":"pi_1","payment_status":"{payment_status}"}}}}}}"#
        );
        testing::event("stripe", &[], &body)
    }

    fn order(db: &mut TestDb) -> Vec<Vec<Value>> {
        let columns =
            "checkout_session_id, payment_intent_id, status, amount, currency, customer_email";
        let sql = format!("SELECT {columns} FROM orders");
        db.rows(&sql, vec![])
    }

    #[test]
    fn a_checkout_writes_its_order_once() {
        let mut db = TestDb::new();
        let event = checkout_event("evt_1", "completed", "paid");
        assert_eq!(db.apply(EFFECTS, &event), Applied::Now);
        assert_eq!(db.apply(EFFECTS, &event), Applied::Earlier);
        let paid = row!["cs_1", "pi_1", "paid", 2000, "eur", "a@b.c"];
        assert_eq!(order(&mut db), [paid]);
    }

    #[test]
    fn a_paid_order_stays_paid_whatever_arrives_after() {
        let mut db = TestDb::new();
        db.apply(EFFECTS, &checkout_event("evt_1", "completed", "unpaid"));
        assert_eq!(order(&mut db)[0][2], "awaiting_payment".into());
        let intent = r#"{"id":"evt_2","type":"payment_intent.succeeded","created":6,"data":{"object":{"id":"pi_1"}}}"#;
        db.apply(EFFECTS, &testing::event("stripe", &[], intent));
        db.apply(
            EFFECTS,
            &checkout_event("evt_3", "async_payment_failed", "unpaid"),
        );
        db.apply(EFFECTS, &checkout_event("evt_4", "completed", "unpaid"));
        assert_eq!(order(&mut db)[0][2], "paid".into());
    }

    #[test]
    fn a_failed_payment_is_not_moved_back_to_waiting() {
        let mut db = TestDb::new();
        db.apply(
            EFFECTS,
            &checkout_event("evt_1", "async_payment_failed", "unpaid"),
        );
        db.apply(EFFECTS, &checkout_event("evt_2", "completed", "unpaid"));
        assert_eq!(order(&mut db)[0][2], "payment_failed".into());
    }

    #[test]
    fn only_money_in_makes_an_order_paid_and_a_receipt_due() {
        let session = |status: &str| {
            CheckoutSession::from_event(&format!(
                r#"{{"created":5,"data":{{"object":{{"id":"cs_1","payment_status":"{status}"}}}}}}"#
            ))
            .unwrap()
        };
        use CheckoutOutcome::*;
        let cases = [
            ("paid", Completed, "paid", true),
            ("unpaid", Completed, "awaiting_payment", false),
            ("no_payment_required", Completed, "complete", false),
            ("paid", AsyncSucceeded, "paid", true),
            ("unpaid", AsyncFailed, "payment_failed", false),
        ];
        for (payment_status, outcome, status, receipt) in cases {
            let s = session(payment_status);
            assert_eq!(outcome.status(&s), status, "{payment_status} {outcome:?}");
            assert_eq!(
                outcome.receipt_due(&s),
                receipt,
                "{payment_status} {outcome:?}"
            );
        }
    }

    #[test]
    fn optional_fields_become_null() {
        let mut db = TestDb::new();
        let body = r#"{"id":"evt_1","type":"checkout.session.completed","created":5,"data":{"object":{"id":"cs_1"}}}"#;
        db.apply(EFFECTS, &testing::event("stripe", &[], body));
        let waiting = row![
            "cs_1",
            Value::Null,
            "awaiting_payment",
            Value::Null,
            Value::Null,
            Value::Null
        ];
        assert_eq!(order(&mut db), [waiting]);
    }

    #[test]
    fn a_session_without_id_is_a_plan_error() {
        assert!(CheckoutSession::from_event(r#"{"created":5,"data":{"object":{}}}"#).is_err());
    }

    #[test]
    fn a_checkout_without_email_writes_no_receipt() {
        let body = r#"{"created":1,"data":{"object":{"id":"cs_1","payment_status":"paid"}}}"#;
        let plan = plan(
            &VerifiedEvent::example("stripe", "checkout.session.completed", body),
            2_000,
        )
        .unwrap();
        assert_eq!(plan.batch.len(), 2);
        assert!(plan.outbox_keys.is_empty());
    }

    #[test]
    fn one_receipt_key_per_checkout_session_whatever_the_event_or_source() {
        let body = |status: &str| {
            format!(
                r#"{{"created":1,"data":{{"object":{{"id":"cs_9","payment_status":"{status}",
                "customer_details":{{"email":"a@b.c"}}}}}}}}"#
            )
        };
        let unpaid = plan(
            &VerifiedEvent::example("stripe", "checkout.session.completed", &body("unpaid")),
            2,
        )
        .unwrap();
        assert!(
            unpaid.outbox_keys.is_empty(),
            "no receipt before the money is in"
        );
        let paid = plan(
            &VerifiedEvent::example("stripe", "checkout.session.completed", &body("paid")),
            2,
        )
        .unwrap();
        let mut later = VerifiedEvent::example(
            "stripe",
            "checkout.session.async_payment_succeeded",
            &body("paid"),
        );
        later.id = "evt_2".into();
        later.source = "stripe-connect".into();
        let later = plan(&later, 3).unwrap();
        assert_eq!(paid.outbox_keys.len(), 1);
        // Another event, from another source: the same key, one receipt.
        assert_eq!(paid.outbox_keys, later.outbox_keys);
        let failed = plan(
            &VerifiedEvent::example(
                "stripe",
                "checkout.session.async_payment_failed",
                &body("unpaid"),
            ),
            2,
        );
        assert!(failed.unwrap().outbox_keys.is_empty());
    }
}
