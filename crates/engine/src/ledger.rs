//! The ledger: one row per handled event (`processed_events`, primary key
//! `(source, event_id)`), the first statement of every effect batch.
//!
//! A second attempt at the same event fails on the row's plain INSERT and
//! rolls back everything else in its batch, which is what makes
//! non-idempotent writes (a counter increment) happen exactly once.
//!
//! Where the signature does not cover the event id, the row also holds the
//! body's SHA-256, unique per source: the fence against a signed body resent
//! under a fresh id. Where a provider signs the body but not the header
//! carrying the id, anyone who saw one delivery could otherwise apply it
//! again and again. A replayed body's
//! batch rolls back like any duplicate's, whatever id it came under.

use crate::d1::{Db, Statement};
use crate::event::VerifiedEvent;

pub(crate) const LEDGER_INSERT: &str = "INSERT INTO processed_events \
     (source, event_id, type, received_at, processed_at, fence_sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// The event's ledger row: "handled", with what the fence needs. The first
/// statement of every effect batch, and alone the record of an event an
/// operator dismissed.
pub fn row(event: &VerifiedEvent, now: i64) -> Statement {
    Statement::new(
        LEDGER_INSERT,
        vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            event.kind.as_str().into(),
            event.received_at.into(),
            now.into(),
            event.fence.as_deref().into(),
        ],
    )
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
    Replayed {
        /// The id the ledger holds the body under.
        of: String,
    },
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
    match db.text(&holder(event), "event_id").await? {
        Some(id) => Ok(held_as(event, id)),
        None => Err(NO_HOLDER.into()),
    }
}

/// The row a ledger clash was with: the event's own first, else the one
/// holding the same signed body.
pub(crate) fn holder(event: &VerifiedEvent) -> Statement {
    Statement::new(
        "SELECT event_id FROM processed_events \
         WHERE source = ?1 AND (event_id = ?2 OR fence_sha256 = ?3) \
         ORDER BY event_id = ?2 DESC LIMIT 1",
        vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            event.fence.as_deref().into(),
        ],
    )
}

/// What a clash with the row of `id` means for `event`.
pub(crate) fn held_as(event: &VerifiedEvent, id: String) -> Applied {
    if id == event.id {
        Applied::Earlier
    } else {
        Applied::Replayed { of: id }
    }
}

/// A clash the ledger cannot account for.
pub(crate) const NO_HOLDER: &str = "the ledger reported a clash but holds no matching row";

/// SQLite reports a primary-key or unique-index clash as a UNIQUE constraint
/// failure naming the table; only the ledger's counts as "already applied".
pub(crate) fn is_ledger_conflict(message: &str) -> bool {
    message.contains("UNIQUE constraint failed: processed_events")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::d1::Value;

    #[test]
    fn the_row_records_the_event_and_its_fence() {
        let event = VerifiedEvent {
            source: "alpha".into(),
            provider: "alpha".into(),
            id: "evt_1".into(),
            kind: "ping".into(),
            body: "{}".into(),
            fence: Some(crate::event::sha256_hex(b"{}")),
            received_at: 1_000,
            forward: None,
        };
        assert_eq!(
            row(&event, 2_000),
            Statement::new(
                LEDGER_INSERT,
                vec![
                    "alpha".into(),
                    "evt_1".into(),
                    "ping".into(),
                    Value::Int(1_000),
                    Value::Int(2_000),
                    crate::event::sha256_hex(b"{}").into(),
                ],
            )
        );
    }

    #[test]
    fn only_a_ledger_clash_counts_as_already_applied() {
        assert!(is_ledger_conflict(
            "D1_ERROR: UNIQUE constraint failed: processed_events.source, processed_events.event_id: SQLITE_CONSTRAINT"
        ));
        assert!(!is_ledger_conflict(
            "UNIQUE constraint failed: outbox.idempotency_key"
        ));
        assert!(!is_ledger_conflict(
            "D1_ERROR: no such table: processed_events"
        ));
    }
}
