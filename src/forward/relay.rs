//! The cron relay's share of forwarding: re-sends deliveries whose queue
//! message was lost, and sends each open breaker's probe when it is due.

use worker::Env;

use super::breaker::held;
use super::claim::note_unusable;
use super::destinations::{self, Bounds};
use crate::clock::now_ms;
use crate::config::ForwardSettings;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};

/// Rows re-sent per run, as the outbox relay's: a backlog drains at this
/// many a minute, within a run's subrequest budget.
const ROWS_PER_RUN: i64 = 1_000;

/// Due deliveries past the grace period whose destination is usable (`?4`)
/// and not held, oldest first; each moved to now, so that a slow queue is
/// re-sent once per grace period, not on every run. `?1` now less the
/// grace, `?2` now, `?3` how many.
const DUE: &str = concat!(
    "UPDATE forwards SET next_attempt_at = ?2 WHERE delivery_id IN (\
         SELECT delivery_id FROM forwards \
         WHERE status IN ('pending', 'sending') AND next_attempt_at <= ?1 \
           AND (status = 'pending' OR lease_until <= ?1) \
           AND destination IN (SELECT value FROM json_each(?4)) \
           AND destination NOT IN (",
    held!(),
    ") ORDER BY next_attempt_at LIMIT ?3) RETURNING delivery_id"
);

/// For each open, usable (`?2`) destination whose probe is due, its oldest
/// waiting delivery not tried since `?3` (so a probe that keeps failing for
/// reasons of its own does not keep the breaker open), or one whose claim
/// expired (a probe whose consumer crashed): found walking the
/// destination's index oldest first. `?1` now.
const PROBES: &str = "SELECT id FROM (\
         SELECT (SELECT delivery_id FROM forwards \
                 WHERE destination = d.name AND status IN ('pending', 'sending') \
                   AND (status = 'pending' OR lease_until < ?1) AND updated_at < ?3 \
                 ORDER BY created_at LIMIT 1) AS id \
         FROM destinations d WHERE d.state = 'open' AND d.paused = 0 AND d.probe_at <= ?1 \
           AND d.name IN (SELECT value FROM json_each(?2))) \
     WHERE id IS NOT NULL";

/// Destinations with due deliveries that cannot go (not declared, or no
/// usable key): at most the first 1,000 such rows are read. `?1` now, `?2`
/// the usable names.
const WAITING: &str = "SELECT DISTINCT destination FROM (SELECT destination FROM forwards \
         WHERE status IN ('pending', 'sending') AND next_attempt_at <= ?1 \
           AND destination NOT IN (SELECT value FROM json_each(?2)) LIMIT 1000)";

pub async fn run(env: &Env) -> worker::Result<()> {
    let settings = ForwardSettings::from_env(env)?;
    let all = destinations::all(env, &Bounds::from_env(env)?)?;
    let usable = destinations::usable(env, &all);
    let names: Vec<&str> = usable.iter().map(|d| d.name.as_str()).collect();
    let names = serde_json::to_string(&names)?;
    let db = Db::from_env(env)?;
    let now = now_ms();
    let grace = now - settings.outbox.relay_grace_ms;
    let params = vec![
        grace.into(),
        now.into(),
        ROWS_PER_RUN.into(),
        names.as_str().into(),
    ];
    let ids = db.texts(&Statement::new(DUE, params)).await?;
    let resent = ids.len();
    let mut jobs = super::paced(ids);
    // Not the last probe's delivery: tried within the last interval.
    let tried_since = now - i64::from(settings.probe_secs) * 1000;
    let probes = Statement::new(
        PROBES,
        vec![now.into(), names.as_str().into(), tried_since.into()],
    );
    jobs.extend(db.texts(&probes).await?.into_iter().map(|id| (id, 0)));
    super::enqueue(env, &jobs).await?;
    let waiting = Statement::new(WAITING, vec![now.into(), names.as_str().into()]);
    for name in db.texts(&waiting).await? {
        note_unusable(&db, &name, now).await?;
    }
    if resent > 0 {
        log::warn(&Line::new("forward_relay").sent(resent));
    }
    Ok(())
}
