//! The dead-letter queue's copies of dead rows. A row is marked `dead`
//! first (with the operators' alert), then its copy is sent, then the send
//! is recorded (`dead_lettered_at`). A send that fails leaves the row
//! unrecorded, and the cron relay sends it again; a row recorded as sent is
//! never sent again. A record names the death it is for (the row's
//! `updated_at` when it died), so that a late one cannot mark a later death,
//! after a requeue, as sent.

use serde::{Deserialize, Serialize};
use worker::Env;

use super::Job;
use crate::config::OUTBOX_DLQ_BINDING;
use crate::d1::{Db, Statement};

/// Dead rows the relay dead-letters per run: one queue batch.
const ROWS_PER_RUN: i64 = 100;

/// Records the copies of `?1` (JSON deaths: key and time) as sent at
/// `?2`, once, each only for the death it names. Looked up by key
/// (`+status`: on `status`, SQLite would read every dead row through
/// `outbox_due`).
const RECORD: &str = "UPDATE outbox SET dead_lettered_at = ?2 \
     FROM json_each(?1) AS j \
     WHERE outbox.idempotency_key = json_extract(j.value, '$.key') \
       AND outbox.updated_at = json_extract(j.value, '$.dead_at') \
       AND +outbox.status = 'dead' AND outbox.dead_lettered_at IS NULL";

/// Dead rows whose copy is missing, dead since before `?1`, oldest first,
/// through the partial index that holds only them.
const MISSING: &str = "SELECT json_object('key', idempotency_key, 'dead_at', updated_at) AS json \
     FROM outbox INDEXED BY outbox_dead_letters \
     WHERE status = 'dead' AND dead_lettered_at IS NULL AND updated_at <= ?1 \
     ORDER BY updated_at LIMIT ?2";

/// A row's death: its key, and its `updated_at` when it died.
#[derive(Serialize, Deserialize)]
pub(super) struct Death {
    pub key: String,
    pub dead_at: f64,
}

/// Sends the dead rows' copies to the dead-letter queue, in one batch, and
/// records them as sent. `fail` injects a failed send (tests only).
pub(super) async fn send(
    env: &Env,
    db: &Db,
    deaths: &[Death],
    fail: bool,
    now: i64,
) -> worker::Result<()> {
    if deaths.is_empty() {
        return Ok(());
    }
    if fail {
        return Err("injected fault: the dead-letter send".into());
    }
    let messages = deaths
        .iter()
        .map(|death| Job::message(&death.key, 0, None, &[]))
        .collect::<worker::Result<Vec<_>>>()?;
    env.queue(OUTBOX_DLQ_BINDING)?
        .send_raw_batch(messages)
        .await?;
    let params = vec![serde_json::to_string(deaths)?.into(), now.into()];
    db.run(&Statement::new(RECORD, params)).await.map(drop)
}

/// Sends the copies a failed send left missing, for rows dead for longer
/// than `grace_ms` (so as not to race the consumer's own send). Returns how
/// many it sent.
pub(super) async fn relay(env: &Env, db: &Db, now: i64, grace_ms: i64) -> worker::Result<usize> {
    let missing = Statement::new(MISSING, vec![(now - grace_ms).into(), ROWS_PER_RUN.into()]);
    let deaths: Vec<Death> = db.rows(&missing).await?;
    send(env, db, &deaths, false, now).await?;
    Ok(deaths.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_reads_only_what_the_partial_index_holds() {
        // migrations/0010: `WHERE status = 'dead' AND dead_lettered_at IS NULL`.
        assert!(MISSING.contains("INDEXED BY outbox_dead_letters"));
        assert!(MISSING.contains("status = 'dead' AND dead_lettered_at IS NULL"));
    }

    #[test]
    fn a_record_is_for_one_death_and_looks_rows_up_by_key() {
        let json = serde_json::to_value(Death {
            key: "k".into(),
            dead_at: 1.0,
        })
        .unwrap();
        for field in json.as_object().unwrap().keys() {
            assert!(
                RECORD.contains(&format!("json_extract(j.value, '$.{field}')")),
                "{field}"
            );
        }
        assert!(
            RECORD.contains("AND outbox.dead_lettered_at IS NULL"),
            "never recorded twice"
        );
        let (_, conditions) = RECORD.split_once("WHERE").unwrap();
        assert!(!conditions
            .replace("+outbox.status", "")
            .contains("status ="));
    }
}
