//! The cron relay's share of forwarding: re-sends deliveries whose queue
//! message was lost, and sends each open breaker's probe when it is due.

use worker::Env;

use super::breaker::held;
use crate::clock::now_ms;
use crate::config::ForwardSettings;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};

/// Rows re-sent per run, as the outbox relay's: a backlog drains at this
/// many a minute, within a run's subrequest budget.
const ROWS_PER_RUN: i64 = 1_000;

/// Due deliveries past the grace period whose destination is not held,
/// oldest first; each moved to now, so that a slow queue is re-sent once
/// per grace period, not on every run. `?1` now less the grace, `?2` now.
const DUE: &str = concat!(
    "UPDATE forwards SET next_attempt_at = ?2 WHERE delivery_id IN (\
         SELECT delivery_id FROM forwards \
         WHERE status IN ('pending', 'sending') AND next_attempt_at <= ?1 \
           AND (status = 'pending' OR lease_until <= ?1) \
           AND destination NOT IN (",
    held!(),
    ") ORDER BY next_attempt_at LIMIT ?3) RETURNING delivery_id"
);

/// The oldest waiting delivery of each open destination whose probe is due.
const PROBES: &str = "SELECT id FROM (\
         SELECT (SELECT delivery_id FROM forwards \
                 WHERE destination = d.name AND status = 'pending' \
                 ORDER BY created_at LIMIT 1) AS id \
         FROM destinations d WHERE d.state = 'open' AND d.paused = 0 AND d.probe_at <= ?1) \
     WHERE id IS NOT NULL";

pub async fn run(env: &Env) -> worker::Result<()> {
    let settings = ForwardSettings::from_env(env)?;
    let db = Db::from_env(env)?;
    let now = now_ms();
    let grace = now - settings.outbox.relay_grace_ms;
    let due = Statement::new(DUE, vec![grace.into(), now.into(), ROWS_PER_RUN.into()]);
    let mut ids = db.texts(&due).await?;
    let resent = ids.len();
    ids.extend(db.texts(&Statement::new(PROBES, vec![now.into()])).await?);
    let jobs: Vec<(String, u32)> = ids.into_iter().map(|id| (id, 0)).collect();
    super::enqueue(env, &jobs).await?;
    if resent > 0 {
        log::warn(&Line::new("forward_relay").sent(resent));
    }
    Ok(())
}
