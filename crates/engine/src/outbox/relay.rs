//! The cron relay (`[triggers] crons`): re-sends the keys of rows whose
//! queue message was lost, and the dead-letter copies a failed send left
//! missing.

use worker::Env;

use super::{dead_letter, enqueue};
use crate::clock::now_ms;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};
use crate::settings::Settings;

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
pub async fn run(env: &Env, engine: &Settings) -> worker::Result<()> {
    let settings = engine.outbox()?;
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
    let db = Db::from_env(env)?;
    let resent = match db.texts(&due).await {
        Ok(keys) => enqueue(env, &keys, None).await.map(|()| keys.len()),
        Err(e) => Err(e),
    };
    match &resent {
        // Their queue messages were lost, or are late: worth a look.
        Ok(n @ 1..) => log::warn(&Line::new("outbox_relay").sent(*n)),
        Ok(_) => {}
        Err(e) => log::error(&Line::new("outbox_relay_failed").error(e)),
    }
    // Whatever became of those: a failed send of theirs is no reason to
    // leave a dead row's copy missing.
    let dead_lettered = dead_letter::relay(env, &db, now, settings.relay_grace_ms).await?;
    if dead_lettered > 0 {
        log::warn(&Line::new("outbox_dead_letter_relay").sent(dead_lettered));
    }
    // A failed resend is logged above; the next run tries again.
    Ok(())
}
