//! The cron relay (`[triggers] crons`): re-sends the keys of rows whose
//! queue message was lost.

use worker::Env;

use super::enqueue;
use crate::clock::now_ms;
use crate::config::OutboxSettings;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};

/// Rows the relay re-sends per run: ten batches, so that a backlog left by
/// a lost queue (a local runtime killed with its messages in memory) drains
/// at 1,000 rows a minute, within a run's subrequest budget.
const ROWS_PER_RUN: i64 = 1_000;

/// Re-sends rows that are due but whose message was lost — `pending` past
/// their due time, or `sending` past their lease — once they are older than
/// the grace period; up to `ROWS_PER_RUN` a run, oldest first. It moves
/// each re-sent row's due time to now, so a backlog that is only slow (a
/// deployed queue behind a struggling consumer) is re-sent once per grace
/// period, not on every run.
pub async fn run(env: &Env) -> worker::Result<()> {
    let settings = OutboxSettings::from_env(env)?;
    let now = now_ms();
    let due = Statement::new(
        "UPDATE outbox SET next_attempt_at = ?2 WHERE idempotency_key IN (\
             SELECT idempotency_key FROM outbox \
             WHERE (status = 'pending' AND next_attempt_at <= ?1) \
                OR (status = 'sending' AND lease_until <= ?1 AND next_attempt_at <= ?1) \
             ORDER BY next_attempt_at LIMIT ?3) \
         RETURNING idempotency_key",
        vec![
            (now - settings.relay_grace_ms).into(),
            now.into(),
            ROWS_PER_RUN.into(),
        ],
    );
    let keys = Db::from_env(env)?.texts(&due).await?;
    enqueue(env, &keys, None).await?;
    if !keys.is_empty() {
        // Their queue messages were lost, or are late: worth a look.
        log::warn(&Line::new("outbox_relay").sent(keys.len()));
    }
    Ok(())
}
