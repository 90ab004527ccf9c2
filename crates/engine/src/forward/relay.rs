//! The cron relay's share of forwarding: re-sends deliveries whose queue
//! message was lost, and sends each open breaker's probe when it is due.

use worker::Env;

use super::breaker::held;
use super::claim::note_unusable;
use crate::clock::now_ms;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};
use crate::settings::Settings;

/// Rows re-sent per run, as the outbox relay's: a backlog drains at this
/// many a minute, within a run's subrequest budget.
const ROWS_PER_RUN: usize = 1_000;

/// One destination's (`?4`) due deliveries past the grace period, oldest
/// first, unless it is held; each moved to now, so that a slow queue is
/// re-sent once per grace period, not on every run (nor twice in one,
/// whatever the grace). `?1` now less the grace, `?2` now, `?3` how many.
/// Through `forwards_due`, by destination and due time: neither a held
/// destination's backlog nor rows not yet due are read. The hold is in the
/// key looked up (NULL when held, which finds nothing): as a condition
/// beside it, SQLite checked it per row, and read the whole backlog
/// (EXPLAIN QUERY PLAN and D1's rows read).
const DUE: &str = concat!(
    "UPDATE forwards SET next_attempt_at = ?2 WHERE delivery_id IN (\
         SELECT delivery_id FROM forwards INDEXED BY forwards_due \
         WHERE destination = (SELECT ?4 WHERE ?4 NOT IN (",
    held!(),
    ")) AND status IN ('pending', 'sending') AND next_attempt_at <= ?1 \
           AND next_attempt_at < ?2 AND (status = 'pending' OR lease_until <= ?1) \
         ORDER BY next_attempt_at LIMIT ?3) RETURNING delivery_id"
);

/// For each open, usable (`?2`) destination whose probe is due, its oldest
/// waiting delivery not tried since `?3` (so a probe that keeps failing for
/// reasons of its own does not keep the breaker open), or one whose claim
/// expired (a probe whose consumer crashed). `?1` now. Each status is
/// walked apart, oldest first, on the destination's index, so that the
/// walk stops at the first such row instead of sorting the backlog.
const PROBES: &str = "SELECT id FROM (SELECT (\
         SELECT delivery_id FROM (\
             SELECT * FROM (SELECT delivery_id, created_at FROM forwards \
                 WHERE destination = d.name AND status = 'pending' AND updated_at < ?3 \
                 ORDER BY created_at LIMIT 1) \
             UNION ALL \
             SELECT * FROM (SELECT delivery_id, created_at FROM forwards \
                 WHERE destination = d.name AND status = 'sending' AND lease_until < ?1 \
                   AND updated_at < ?3 \
                 ORDER BY created_at LIMIT 1)) \
         ORDER BY created_at LIMIT 1) AS id \
     FROM destinations d WHERE d.state = 'open' AND d.paused = 0 AND d.probe_at <= ?1 \
       AND d.name IN (SELECT value FROM json_each(?2))) \
     WHERE id IS NOT NULL";

/// The destinations with deliveries due by `?1` (and meeting `$due`): the
/// destinations with unfinished deliveries, one index step each, then one
/// due row of each. No destination's backlog is read. A macro, for
/// `concat!`.
macro_rules! with_due {
    ($due:literal) => {
        concat!(
            "WITH RECURSIVE d(name) AS (\
             SELECT (SELECT min(destination) FROM forwards INDEXED BY forwards_due \
                     WHERE status IN ('pending', 'sending')) \
             UNION ALL \
             SELECT (SELECT min(destination) FROM forwards INDEXED BY forwards_due \
                     WHERE status IN ('pending', 'sending') AND destination > d.name) \
             FROM d WHERE d.name IS NOT NULL) \
         SELECT name FROM d WHERE name IS NOT NULL \
           AND EXISTS (SELECT 1 FROM forwards INDEXED BY forwards_due \
                       WHERE destination = d.name AND status IN ('pending', 'sending') \
                         AND next_attempt_at <= ?1 AND (",
            $due,
            "))"
        )
    };
}

/// Destinations with due deliveries that cannot go (not declared, or no
/// usable key; `?2` the usable names, `?1` now).
const WAITING: &str = concat!(
    with_due!("1"),
    " AND name NOT IN (SELECT value FROM json_each(?2))"
);

/// The usable (`?2`), not held destinations with deliveries due by `?1`
/// (now less the grace), not in flight: the ones the relay re-sends for,
/// in order. As `DUE` picks them, so that none takes a share for nothing.
const ACTIVE: &str = concat!(
    with_due!("status = 'pending' OR lease_until <= ?1"),
    " AND name IN (SELECT value FROM json_each(?2)) AND name NOT IN (",
    held!(),
    ") ORDER BY name"
);

/// One run of the forward relay: re-sends what is due, and the breakers'
/// probes.
pub async fn run(env: &Env, engine: &Settings) -> worker::Result<()> {
    let settings = engine.forward()?;
    let usable = engine.usable()?;
    let names: Vec<&str> = usable.iter().map(|d| d.name.as_str()).collect();
    let db = Db::from_env(env)?;
    let now = now_ms();
    let grace = now - settings.outbox.relay_grace_ms;
    let names = serde_json::to_string(&names)?;
    let (ids, mut rows_read) = due(&db, &names, grace, now).await?;
    let resent = ids.len();
    let mut jobs = super::paced(ids);
    // Not the last probe's delivery: tried within the last interval.
    let tried_since = now - i64::from(settings.probe_secs) * 1000;
    let probes = Statement::new(
        PROBES,
        vec![now.into(), names.as_str().into(), tried_since.into()],
    );
    let waiting = Statement::new(WAITING, vec![now.into(), names.as_str().into()]);
    let (probed, read) = db.batch_texts_read(&[probes], "id").await?;
    rows_read += read;
    jobs.extend(probed.into_iter().flatten().map(|id| (id, 0)));
    super::enqueue(env, &jobs).await?;
    let (unusable, read) = db.batch_texts_read(&[waiting], "name").await?;
    rows_read += read;
    for name in unusable.into_iter().flatten() {
        note_unusable(&db, &name, now).await?;
    }
    // What the run read, so that a scan shows; worth a look when it re-sent.
    let line = Line::new("forward_relay").sent(resent).rows_read(rows_read);
    if resent > 0 {
        log::warn(&line);
    } else {
        log::info(&line);
    }
    Ok(())
}

/// The due deliveries of the usable destinations (`names`, JSON) that are
/// not held, moved to now: `ROWS_PER_RUN` shared equally among those with
/// any due, then what some left to those that had more. Returns their ids,
/// and the rows D1 read.
async fn due(db: &Db, names: &str, grace: i64, now: i64) -> worker::Result<(Vec<String>, usize)> {
    let active = Statement::new(ACTIVE, vec![grace.into(), names.into()]);
    let (active, mut read) = db.batch_texts_read(&[active], "name").await?;
    let mut round: Vec<String> = active.into_iter().flatten().collect();
    let (mut ids, mut left) = (Vec::new(), ROWS_PER_RUN);
    for _ in 0..2 {
        // At least one row each, for as many as there are rows left.
        round.truncate(left);
        if round.is_empty() {
            break;
        }
        let share = left / round.len();
        let statements: Vec<Statement> = round
            .iter()
            .map(|name| {
                let params = vec![
                    grace.into(),
                    now.into(),
                    (share as i64).into(),
                    name.as_str().into(),
                ];
                Statement::new(DUE, params)
            })
            .collect();
        let (found, r) = db.batch_texts_read(&statements, "delivery_id").await?;
        read += r;
        let mut full = Vec::new();
        for (name, rows) in round.into_iter().zip(found) {
            if rows.len() == share {
                full.push(name);
            }
            left = left.saturating_sub(rows.len());
            ids.extend(rows);
        }
        round = full;
    }
    Ok((ids, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_query_says_what_the_index_it_names_holds() {
        // `INDEXED BY` fails unless the query states the partial index's
        // own condition (migrations/0011).
        for sql in [DUE, WAITING, ACTIVE] {
            assert!(sql.contains("INDEXED BY forwards_due"), "{sql}");
            assert!(sql.contains("status IN ('pending', 'sending')"), "{sql}");
        }
    }
}
