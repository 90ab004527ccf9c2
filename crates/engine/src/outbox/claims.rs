//! The consumer's claims on outbox rows: a batch's rows claimed in one
//! conditional update, and every result written only where its claim (the
//! attempt number and the lease) still holds, so that a run whose lease
//! expired (stalled after its call) cannot overwrite the result of the run
//! that took the row over — not even when a requeue has reset the attempt
//! count since (the lease time tells the claims apart).

use serde::{Deserialize, Serialize};

use crate::clock::now_ms;
use crate::d1::{Db, Statement, Value};
use crate::handoff_rows::{self, Row};
use crate::log::{self, Line};

/// The outbox rows, as the consumer reads and writes them.
pub(super) struct Rows(pub(super) Db);

/// A row this consumer run claimed: the attempt number and lease the claim
/// wrote.
#[derive(Deserialize)]
pub(super) struct Claimed {
    pub key: String,
    pub source: String,
    pub event_id: String,
    pub action: String,
    pub payload: String,
    pub attempts: i64,
    /// As stored: compared back exactly, whether D1 kept it as an integer
    /// or a real (it binds JS numbers).
    lease_until: f64,
}

/// A row that could not be claimed, as it is. Its status is read as text,
/// so that one this build does not know is acknowledged, not an error.
#[derive(Deserialize)]
pub(super) struct Current {
    pub key: String,
    pub status: String,
    pub lease_until: Option<f64>,
    pub next_attempt_at: f64,
}

/// Claims the rows named in `?1` (JSON) that are due, or whose lease
/// expired (a crashed run's); `?2` now, `?3` the lease. `+status` keeps
/// SQLite from the `outbox_due` index, which would read every due row of a
/// backlog, to look each row up by its key.
const CLAIM: &str = "UPDATE outbox SET status = 'sending', attempts = attempts + 1, \
         lease_until = ?2 + ?3, updated_at = ?2 \
     WHERE idempotency_key IN (SELECT value FROM json_each(?1)) \
       AND ((+status = 'pending' AND next_attempt_at <= ?2) \
            OR (+status = 'sending' AND lease_until < ?2)) \
     RETURNING json_object('key', idempotency_key, 'source', source, \
         'event_id', event_id, 'action', action, \
         'payload', payload, 'attempts', attempts, 'lease_until', lease_until) AS json";

const CURRENT: &str = "SELECT json_object('key', idempotency_key, 'status', status, \
         'lease_until', lease_until, 'next_attempt_at', next_attempt_at) AS json \
     FROM outbox WHERE idempotency_key IN (SELECT value FROM json_each(?1))";

/// Marks `sent` every row in `?1` (JSON: key, attempts, lease, note) whose
/// claim holds; `?2` now. Returns the keys it marked. Looked up by key
/// (`+status`, as in [`CLAIM`]).
const SENT: &str = "UPDATE outbox SET status = 'sent', note = json_extract(j.value, '$.note'), \
         lease_until = NULL, updated_at = ?2 \
     FROM json_each(?1) AS j \
     WHERE outbox.idempotency_key = json_extract(j.value, '$.key') \
       AND +outbox.status = 'sending' AND outbox.attempts = json_extract(j.value, '$.attempts') \
       AND outbox.lease_until = json_extract(j.value, '$.lease_until') \
     RETURNING idempotency_key";

/// One row of [`SENT`]'s JSON.
#[derive(Serialize)]
struct Sent<'a> {
    key: &'a str,
    attempts: i64,
    lease_until: f64,
    note: Option<&'a str>,
}

/// Sets a claimed row's outcome and clears its lease, only if the claim
/// (`?1` key, `?2` attempts, `?4` lease) still holds; `?3` is now.
macro_rules! complete {
    ($assignments:literal) => {
        concat!(
            "UPDATE outbox SET ",
            $assignments,
            ", lease_until = NULL, updated_at = ?3 \
             WHERE idempotency_key = ?1 AND status = 'sending' AND attempts = ?2 \
               AND lease_until = ?4"
        )
    };
}

impl Rows {
    /// The claim: only one consumer run holds a row at a time, and only
    /// once it is due; a crashed run's lease expires and the row can be
    /// claimed again.
    /// The messages' `carried` rows are written to D1 first, in the same
    /// call (see `handoff_rows`).
    pub async fn claim(
        &self,
        keys: &[&str],
        carried: &[Row],
        now: i64,
        lease_ms: i64,
    ) -> worker::Result<Vec<Claimed>> {
        let params = vec![
            serde_json::to_string(keys)?.into(),
            now.into(),
            lease_ms.into(),
        ];
        let claim = Statement::new(CLAIM, params);
        handoff_rows::claim_after(&self.0, carried, claim).await
    }

    /// The rows among `keys` as they stand.
    pub async fn current(&self, keys: &[&str]) -> worker::Result<Vec<Current>> {
        let params = vec![serde_json::to_string(keys)?.into()];
        self.0.rows(&Statement::new(CURRENT, params)).await
    }

    /// Marks each row `sent`, with its note, where its claim holds; returns
    /// the keys of those it marked.
    pub async fn mark_sent(
        &self,
        rows: &[(&Claimed, Option<String>)],
        now: i64,
    ) -> worker::Result<Vec<String>> {
        let sent: Vec<Sent> = rows
            .iter()
            .map(|(row, note)| Sent {
                key: &row.key,
                attempts: row.attempts,
                lease_until: row.lease_until,
                note: note.as_deref(),
            })
            .collect();
        let params = vec![serde_json::to_string(&sent)?.into(), now.into()];
        self.0.texts(&Statement::new(SENT, params)).await
    }
}

impl Claimed {
    /// Dead as of `at`, and in the same transaction `alert` (a statement
    /// writing its row only where this claim made the row dead at `at`).
    /// Says whether the claim held, and whether the alert's row was written.
    pub async fn mark_dead(
        &self,
        rows: &Rows,
        error: &str,
        at: i64,
        alert: Option<Statement>,
    ) -> worker::Result<(bool, bool)> {
        let sql = complete!("status = 'dead', last_error = ?5, dead_lettered_at = NULL");
        self.complete(rows, sql, vec![error.into()], at, alert)
            .await
    }

    /// Back to `pending`, due at `due` (ms).
    pub async fn reschedule(&self, rows: &Rows, error: &str, due: i64) -> worker::Result<bool> {
        let sql = complete!("status = 'pending', last_error = ?5, next_attempt_at = ?6");
        let values = vec![error.into(), due.into()];
        Ok(self.complete(rows, sql, values, now_ms(), None).await?.0)
    }

    /// Runs a [`complete!`] statement as of `now`, and `then` after it in
    /// the same transaction; says whether the claim still held, and whether
    /// `then` changed a row.
    async fn complete(
        &self,
        rows: &Rows,
        sql: &'static str,
        values: Vec<Value>,
        now: i64,
        then: Option<Statement>,
    ) -> worker::Result<(bool, bool)> {
        let mut params: Vec<Value> = vec![
            self.key.as_str().into(),
            self.attempts.into(),
            now.into(),
            self.lease_until.into(),
        ];
        params.extend(values);
        let statements: Vec<Statement> = std::iter::once(Statement::new(sql, params))
            .chain(then)
            .collect();
        let changes = rows.0.batch_changes(&statements).await?;
        let changed = |i: usize| changes.get(i).is_some_and(|n| *n > 0);
        let (held, then_changed) = (changed(0), changed(1));
        if !held {
            log::error(
                &Line::new("outbox_claim_lost")
                    .idempotency_key(&self.key)
                    .attempt(self.attempts),
            );
        }
        Ok((held, then_changed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sent_update_reads_every_field_it_is_given() {
        let json = serde_json::to_value(Sent {
            key: "k",
            attempts: 2,
            lease_until: 1.0,
            note: None,
        })
        .unwrap();
        let fields = json.as_object().unwrap();
        assert_eq!(fields.len(), 4);
        for field in fields.keys() {
            assert!(
                SENT.contains(&format!("json_extract(j.value, '$.{field}')")),
                "{field}"
            );
        }
    }

    #[test]
    fn the_batch_statements_look_rows_up_by_key() {
        // On `status`, SQLite would pick the `outbox_due` index and read
        // every due row of a backlog: EXPLAIN QUERY PLAN said so.
        for sql in [CLAIM, SENT] {
            let (_, conditions) = sql.split_once("WHERE").unwrap();
            let unmarked = conditions
                .replace("+status", "")
                .replace("+outbox.status", "");
            assert!(!unmarked.contains("status ="), "{sql}");
        }
    }

    #[test]
    fn every_write_holds_only_while_the_claim_does() {
        for sql in [SENT, complete!("status = 'dead'")] {
            assert!(sql.contains("status = 'sending'"), "{sql}");
            assert!(sql.contains("attempts ="), "{sql}");
            assert!(sql.contains("lease_until ="), "{sql}");
        }
    }
}
