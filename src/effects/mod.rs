//! Business effects: what an event changes in D1, planned as SQL statements
//! and applied in ONE batch (one transaction) together with the ledger row.
//!
//! The ledger row (`processed_events`, primary key `(source, event_id)`) is a
//! plain INSERT placed first in the batch. A second attempt at the same event
//! fails on it and rolls back everything else, which is what makes
//! non-idempotent writes (a counter increment) happen exactly once. To add an
//! effect, write a function returning statements (see `stars.rs`) and add an
//! arm to [`plan`].
//!
//! Planning is pure, so it is tested on the host; only [`apply`] touches D1.

mod orders;
mod stars;
mod subscriptions;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::event::VerifiedEvent;

/// A bound SQL parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Text(String),
    Int(i64),
    Null,
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// One SQL statement of an effect batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: &'static str,
    pub params: Vec<Value>,
}

/// The event's body lacks what its effect needs. Permanent: retrying the
/// same bytes cannot help, so the receiver answers 400 before claiming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

const LEDGER_INSERT: &str = "INSERT INTO processed_events \
     (source, event_id, type, received_at, processed_at) VALUES (?1, ?2, ?3, ?4, ?5)";

/// The full batch for an event: the ledger row first, then its effect.
/// `now` (ms) stamps `processed_at` and the effect rows.
pub fn plan(event: &VerifiedEvent, now: i64) -> Result<Vec<Statement>, PlanError> {
    let ledger = Statement {
        sql: LEDGER_INSERT,
        params: vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            event.kind.as_str().into(),
            event.received_at.into(),
            now.into(),
        ],
    };
    let body = event.body.as_str();
    let effect = match (event.provider.as_str(), event.kind.as_str()) {
        ("stripe", "checkout.session.completed") => orders::checkout_completed(body, now)?,
        ("stripe", "payment_intent.succeeded") => orders::payment_succeeded(body, now)?,
        ("stripe", "customer.subscription.updated" | "customer.subscription.deleted") => {
            subscriptions::set_state(body, &event.id, now)?
        }
        ("github", "star.created") => stars::count(body, 1)?,
        ("github", "star.deleted") => stars::count(body, -1)?,
        // Any other event: the ledger row alone records that it was handled.
        _ => Vec::new(),
    };
    Ok(std::iter::once(ledger).chain(effect).collect())
}

/// How an apply attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// This attempt committed the effect.
    Now,
    /// The ledger already held the event: an earlier attempt committed the
    /// effect (its reply or its "done" mark was lost). Success, not an error.
    Earlier,
}

/// Runs the planned batch as one D1 transaction.
pub async fn apply(db: &worker::D1Database, batch: Vec<Statement>) -> worker::Result<Applied> {
    let statements = batch
        .into_iter()
        .map(|s| db.prepare(s.sql).bind(&to_js(s.params)))
        .collect::<worker::Result<Vec<_>>>()?;
    match db.batch(statements).await {
        Ok(_) => Ok(Applied::Now),
        Err(e) if is_ledger_conflict(&e.to_string()) => Ok(Applied::Earlier),
        Err(e) => Err(e),
    }
}

/// SQLite reports a primary-key clash as a UNIQUE constraint failure naming
/// the table; only the ledger's counts as "already applied".
fn is_ledger_conflict(message: &str) -> bool {
    message.contains("UNIQUE constraint failed: processed_events")
}

fn to_js(params: Vec<Value>) -> Vec<worker::wasm_bindgen::JsValue> {
    use worker::wasm_bindgen::JsValue;
    params
        .into_iter()
        .map(|v| match v {
            Value::Text(s) => JsValue::from_str(&s),
            // D1 binds JS numbers; amounts and millisecond times fit in 2^53.
            Value::Int(n) => JsValue::from_f64(n as f64),
            Value::Null => JsValue::NULL,
        })
        .collect()
}

/// A Stripe event: its creation time and `data.object`.
#[derive(Deserialize)]
struct StripeEvent<T> {
    created: i64,
    data: StripeData<T>,
}

#[derive(Deserialize)]
struct StripeData<T> {
    object: T,
}

fn parse<T: DeserializeOwned>(body: &str) -> Result<T, PlanError> {
    serde_json::from_str(body).map_err(|e| PlanError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn event(provider: &str, kind: &str, body: &str) -> VerifiedEvent {
        VerifiedEvent {
            source: provider.into(),
            provider: provider.into(),
            id: "evt_1".into(),
            kind: kind.into(),
            body: body.into(),
            received_at: 1_000,
        }
    }

    #[test]
    fn every_batch_starts_with_the_ledger_row() {
        let plan = plan(&event("github", "ping", "{}"), 2_000).unwrap();
        assert_eq!(
            plan,
            vec![Statement {
                sql: LEDGER_INSERT,
                params: vec![
                    "github".into(),
                    "evt_1".into(),
                    "ping".into(),
                    Value::Int(1_000),
                    Value::Int(2_000)
                ],
            }]
        );
    }

    #[test]
    fn effects_follow_the_ledger_row() {
        let body = r#"{"action":"created","repository":{"full_name":"o/r"}}"#;
        let plan = plan(&event("github", "star.created", body), 2_000).unwrap();
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].sql, LEDGER_INSERT);
    }

    #[test]
    fn only_a_ledger_clash_counts_as_already_applied() {
        assert!(is_ledger_conflict(
            "D1_ERROR: UNIQUE constraint failed: processed_events.source, processed_events.event_id: SQLITE_CONSTRAINT"
        ));
        assert!(!is_ledger_conflict(
            "UNIQUE constraint failed: orders.checkout_session_id"
        ));
        assert!(!is_ledger_conflict(
            "D1_ERROR: no such table: processed_events"
        ));
    }
}
