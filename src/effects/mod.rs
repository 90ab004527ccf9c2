//! Business effects: what an event changes in D1, planned as SQL statements
//! and applied in ONE batch (one transaction) together with the ledger row
//! and the outbox rows of its side effects (see `outbox`).
//!
//! The ledger row (`processed_events`, primary key `(source, event_id)`) is a
//! plain INSERT placed first in the batch. A second attempt at the same event
//! fails on it and rolls back everything else, which is what makes
//! non-idempotent writes (a counter increment) happen exactly once.
//!
//! Where the signature does not cover the event id, the row also holds the
//! body's SHA-256, unique per source: the fence against a signed body resent
//! under a fresh id. GitHub, Shopify, Linear, Twilio and header-keyed generic
//! HMAC sign the body but not the header carrying the id, so anyone who saw
//! one delivery could otherwise apply it again and again. A replayed body's
//! batch rolls back like any duplicate's, whatever id it came under. To add an
//! effect, write a function returning statements (see `stars.rs`) and add an
//! arm to [`plan`].
//!
//! Planning is pure, so it is tested on the host; only [`apply`] touches D1.

pub mod orders;
pub mod stars;
mod subscriptions;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::d1::Db;
pub use crate::d1::{Statement, Value};
use crate::event::VerifiedEvent;
use crate::outbox::{self, notify_chat, send_receipt, SideEffect};

/// The event's body lacks what its effect needs. Permanent: retrying the
/// same bytes cannot help, so the receiver answers 400 before claiming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

const LEDGER_INSERT: &str = "INSERT INTO processed_events \
     (source, event_id, type, received_at, processed_at, fence_sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// An event's effect: the batch to commit, and the keys of the outbox rows
/// it writes (to enqueue once it has committed).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub batch: Vec<Statement>,
    pub outbox_keys: Vec<String>,
}

/// The event's ledger row: "handled", with what the fence needs. The first
/// statement of every effect batch, and alone the record of an event an
/// operator dismissed.
pub fn ledger_row(event: &VerifiedEvent, now: i64) -> Statement {
    Statement {
        sql: LEDGER_INSERT,
        params: vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            event.kind.as_str().into(),
            event.received_at.into(),
            now.into(),
            event.fence.as_deref().into(),
        ],
    }
}

/// The full batch for an event: the ledger row first, then its writes, then
/// one outbox row per side effect. `now` (ms) stamps `processed_at` and the
/// rows.
pub fn plan(event: &VerifiedEvent, now: i64) -> Result<Plan, PlanError> {
    let ledger = ledger_row(event, now);
    let body = event.body.as_str();
    let checkout = match event.provider.as_str() {
        "stripe" => orders_outcome(&event.kind),
        _ => None,
    };
    let (writes, side_effects): (Vec<Statement>, Vec<SideEffect>) =
        match (event.provider.as_str(), event.kind.as_str(), checkout) {
            (_, _, Some(outcome)) => {
                let session = orders::CheckoutSession::from_event(body)?;
                let receipt = outcome
                    .receipt_due(&session)
                    .then(|| send_receipt::intent(&session))
                    .flatten();
                (
                    orders::checkout(&session, outcome, now),
                    receipt.into_iter().collect(),
                )
            }
            ("stripe", "payment_intent.succeeded", _) => {
                (orders::payment_succeeded(body, now)?, Vec::new())
            }
            ("stripe", "customer.subscription.updated" | "customer.subscription.deleted", _) => {
                (subscriptions::set_state(body, &event.id, now)?, Vec::new())
            }
            ("github", "star.created", _) => {
                let star = stars::StarEvent::from_event(body, true)?;
                (stars::count(&star, 1), vec![notify_chat::intent(&star)])
            }
            ("github", "star.deleted", _) => {
                let star = stars::StarEvent::from_event(body, false)?;
                (stars::count(&star, -1), Vec::new())
            }
            // Any other event: the ledger row alone records that it was handled.
            _ => (Vec::new(), Vec::new()),
        };
    let (outbox_rows, outbox_keys): (Vec<Statement>, Vec<String>) = side_effects
        .into_iter()
        .map(|side_effect| outbox::insert(event, side_effect, now))
        .unzip();
    let batch = std::iter::once(ledger)
        .chain(writes)
        .chain(outbox_rows)
        .collect();
    Ok(Plan { batch, outbox_keys })
}

/// The checkout events and what each says of its order.
fn orders_outcome(kind: &str) -> Option<orders::CheckoutOutcome> {
    use orders::CheckoutOutcome::*;
    match kind {
        "checkout.session.completed" => Some(Completed),
        "checkout.session.async_payment_succeeded" => Some(AsyncSucceeded),
        "checkout.session.async_payment_failed" => Some(AsyncFailed),
        _ => None,
    }
}

/// How an apply attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// This attempt committed the effect.
    Now,
    /// The ledger already held the event: an earlier attempt committed the
    /// effect (its reply or its "done" mark was lost). Success, not an error.
    Earlier,
    /// The ledger holds this source's same signed body under another event
    /// id (`of`): a replayed body. Its effect already happened; nothing is
    /// done again.
    Replayed { of: String },
}

/// Runs the planned batch for `event` as one D1 transaction.
pub async fn apply(db: &Db, event: &VerifiedEvent, batch: &[Statement]) -> worker::Result<Applied> {
    match db.batch(batch).await {
        Ok(()) => Ok(Applied::Now),
        Err(e) if is_ledger_conflict(&e.to_string()) => ledger_holder(db, event).await,
        Err(e) => Err(e),
    }
}

/// After a ledger clash: which row the event clashed with. Its own id first
/// (an earlier attempt), else the row holding the same body (a replay).
async fn ledger_holder(db: &Db, event: &VerifiedEvent) -> worker::Result<Applied> {
    let holder = Statement::new(
        "SELECT event_id FROM processed_events \
         WHERE source = ?1 AND (event_id = ?2 OR fence_sha256 = ?3) \
         ORDER BY event_id = ?2 DESC LIMIT 1",
        vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            event.fence.as_deref().into(),
        ],
    );
    match db.text(&holder, "event_id").await? {
        Some(id) if id == event.id => Ok(Applied::Earlier),
        Some(id) => Ok(Applied::Replayed { of: id }),
        None => Err("the ledger reported a clash but holds no matching row".into()),
    }
}

/// SQLite reports a primary-key or unique-index clash as a UNIQUE constraint
/// failure naming the table; only the ledger's counts as "already applied".
fn is_ledger_conflict(message: &str) -> bool {
    message.contains("UNIQUE constraint failed: processed_events")
}

/// A Stripe event: its creation time and `data.object`.
#[derive(Deserialize)]
pub(crate) struct StripeEvent<T> {
    pub created: i64,
    pub data: StripeData<T>,
}

#[derive(Deserialize)]
pub(crate) struct StripeData<T> {
    pub object: T,
}

pub(crate) fn parse<T: DeserializeOwned>(body: &str) -> Result<T, PlanError> {
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
            fence: Some(crate::event::sha256_hex(body.as_bytes())),
            received_at: 1_000,
        }
    }

    #[test]
    fn every_batch_starts_with_the_ledger_row() {
        let plan = plan(&event("github", "ping", "{}"), 2_000).unwrap();
        assert!(plan.outbox_keys.is_empty());
        assert_eq!(
            plan.batch,
            vec![Statement {
                sql: LEDGER_INSERT,
                params: vec![
                    "github".into(),
                    "evt_1".into(),
                    "ping".into(),
                    Value::Int(1_000),
                    Value::Int(2_000),
                    crate::event::sha256_hex(b"{}").into(),
                ],
            }]
        );
    }

    #[test]
    fn writes_then_outbox_rows_follow_the_ledger_row() {
        let body = r#"{"action":"created","starred_at":"2026-01-01T00:00:00Z","repository":{"full_name":"o/r"}}"#;
        let plan = plan(&event("github", "star.created", body), 2_000).unwrap();
        assert_eq!(plan.batch.len(), 3);
        assert_eq!(plan.batch[0].sql, LEDGER_INSERT);
        assert!(plan.batch[1].sql.contains("repo_stars"));
        assert!(plan.batch[2].sql.starts_with("INSERT INTO outbox"));
        let key = outbox::idempotency_key("github", "evt_1", "notify_chat");
        assert_eq!(plan.outbox_keys, vec![key.clone()]);
        assert_eq!(plan.batch[2].params[0], Value::Text(key));
    }

    #[test]
    fn a_checkout_without_email_writes_no_receipt() {
        let body = r#"{"created":1,"data":{"object":{"id":"cs_1","payment_status":"paid"}}}"#;
        let plan = plan(&event("stripe", "checkout.session.completed", body), 2_000).unwrap();
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
            &event("stripe", "checkout.session.completed", &body("unpaid")),
            2,
        )
        .unwrap();
        assert!(
            unpaid.outbox_keys.is_empty(),
            "no receipt before the money is in"
        );
        let paid = plan(
            &event("stripe", "checkout.session.completed", &body("paid")),
            2,
        )
        .unwrap();
        let mut later = event(
            "stripe",
            "checkout.session.async_payment_succeeded",
            &body("paid"),
        );
        later.id = "evt_2".into();
        later.source = "stripe-connect".into();
        let later = plan(&later, 3).unwrap();
        assert_eq!(paid.outbox_keys.len(), 1);
        assert_eq!(paid.outbox_keys, later.outbox_keys);
        assert_eq!(
            paid.outbox_keys[0],
            outbox::idempotency_key("checkout_session", "cs_9", "send_receipt")
        );
        let failed = plan(
            &event(
                "stripe",
                "checkout.session.async_payment_failed",
                &body("unpaid"),
            ),
            2,
        );
        assert!(failed.unwrap().outbox_keys.is_empty());
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
