//! The cron relay: hands off to D1 what events committed in Postgres left
//! unmarked (their rows rode to D1 on their queue messages, or were copied
//! by the event, and the relay marks them, hundreds to a transaction, after
//! copying them again as a no-op), and what a message lost, D1 refusing,
//! or an attempt cut short between its commit and its messages left.
//! Rows are claimed with `FOR UPDATE SKIP LOCKED`, so that two runs never
//! hold one row.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;
use worker::Env;

use std::pin::pin;
use std::time::Duration;

use futures_util::future::{select, Either};
use worker::Delay;

use super::handoff::read_all;
use super::pipeline::Pipeline;
use super::tries::{counted, Claimed, KEPT_CALLS, KEPT_MS, STUCK_TRIES};
use super::{begin, with_client, PgError};
use crate::clock::now_ms;
use crate::config::Store;
use crate::d1::Db;
use crate::handoff_rows::{d1_batch, Row};
use crate::log::{self, Line};
use crate::settings::Settings;

/// The relay's claim: rows past the grace period, the fewest failed tries
/// first, then the oldest, skipping any another run (or an event's attempt)
/// holds, and those it gave up on (see `tries`). A row D1 keeps refusing
/// sinks behind the others. (Index `webhook_outbox_due`.) It locks up to
/// `$2` rows, and returns them in order while their values come to at most
/// `$4` bytes (the first row whatever its size): a row's payload has no
/// cap, and a batch lives several times over in memory during its D1 call.
/// Each row says how many were locked, so that a batch cut by bytes is not
/// taken for the backlog's end.
const CLAIM_DUE: &str = "WITH locked AS MATERIALIZED (\
     SELECT kind, key, params, source, event_id, tries, created_at FROM webhook_outbox \
     WHERE handed_off_at IS NULL AND created_at <= $1 AND tries < $3 \
     ORDER BY tries, created_at LIMIT $2 FOR UPDATE SKIP LOCKED), \
     sized AS (SELECT *, count(*) OVER () AS locked, \
     row_number() OVER claimed AS nth, sum(octet_length(params)) OVER claimed AS upto \
     FROM locked WINDOW claimed AS (ORDER BY tries, created_at, kind, key \
     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) \
     SELECT kind, key, params, source, event_id, tries, locked FROM sized \
     WHERE nth = 1 OR upto <= $4 ORDER BY nth";

/// How much one relay transaction claims, when D1 takes it within its
/// deadline: one D1 call for it all. A run's calls are few ([`CALLS`]), so
/// this sets how fast a backlog drains (BENCHMARKS.md).
const CLAIM: Size = Size {
    rows: 1_000,
    bytes: 1_000_000,
};

/// How many times a run halves its claim after D1 calls that outlast
/// their deadline (down to 125 rows): then it stops, since each such batch
/// holds its rows for its whole deadline, and a D1 that is slow whatever
/// the size is not helped by more.
const HALVINGS: usize = 3;

/// How many rows, and how many bytes of their values, a batch claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Size {
    rows: i64,
    bytes: i64,
}

impl Size {
    /// Half of it: a batch D1 did not take before its deadline is tried
    /// again smaller in the same run, so that a D1 slowed by the batch's
    /// size does not meet the same batch, unchanged, run after run.
    fn halved(self) -> Size {
        Size {
            rows: (self.rows / 2).max(1),
            bytes: (self.bytes / 2).max(1),
        }
    }
}

/// How long a cron run hands off, batch after batch, before it leaves the
/// rest to the next run (which may overlap it: they claim apart).
const RELAY_BUDGET_MS: i64 = 20_000;

/// At most so many D1 calls a run, for its batches and their halves
/// alike: D1 allows an invocation 1,000 queries (50 on the Free plan),
/// which the outbox and forwarding relays after this one share.
const CALLS: usize = 30;

/// Rows the relay could not hand off (D1, answering, refused them; or they
/// are unreadable): each counts a try.
const TRIED: &str = "UPDATE webhook_outbox SET tries = tries + 1 \
     WHERE (kind, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))";

/// Rows handed off: D1 holds them.
const MARK: &str = "UPDATE webhook_outbox SET handed_off_at = $1 \
     WHERE handed_off_at IS NULL AND (kind, key) IN (SELECT * FROM unnest($2::text[], $3::text[]))";

/// The cron's run: the relay, when effects commit in Postgres; logged as
/// `handoff_relay` (with how many rows it handed off) or
/// `handoff_relay_failed`.
pub(crate) async fn run(env: &Env, settings: &Settings) {
    let store = settings.inbox().map(|inbox| inbox.store);
    let (Ok(Store::Postgres), Ok(outbox)) = (store, settings.outbox()) else {
        return;
    };
    match relay(env, settings, outbox.relay_grace_ms).await {
        Ok((0, _)) => {}
        Ok((sent, batches)) => {
            let line = Line::new("handoff_relay").sent(sent);
            let plural = if batches == 1 { "" } else { "es" };
            log::info(&line.detail(format!("in {batches} batch{plural}")));
        }
        // Logged once per isolate, as `store_behind`, naming the migration.
        Err(PgError::Behind(_)) => {}
        Err(e) => log::error(&Line::new("handoff_relay_failed").error(e.message())),
    }
}

/// The cron relay: hands off the rows left past `grace_ms` (each event's
/// rows, which its messages carried to D1, and any whose hand-off was cut
/// short), a [`CLAIM`] at a time, until none is left or [`RELAY_BUDGET_MS`]
/// is spent. Returns how many rows it handed off, in how many batches.
async fn relay(env: &Env, settings: &Settings, grace_ms: i64) -> Result<(usize, usize), PgError> {
    let until = now_ms() + RELAY_BUDGET_MS;
    let (mut sent, mut batches, mut calls) = (0, 0, CALLS);
    let (mut size, mut halvings) = (CLAIM, HALVINGS);
    while calls > KEPT_CALLS {
        let due = now_ms() - grace_ms;
        let batch = relay_batch(env, settings, due, size, &mut calls).await?;
        (sent, batches) = (sent + batch.copied, batches + 1);
        if batch.late && halvings > 0 {
            (size, halvings) = (size.halved(), halvings - 1);
        } else if batch.last || !batch.whole {
            // The backlog's end, or D1 in trouble (a row it refuses, or
            // late after halving): the rest waits for the next run.
            break;
        }
        if now_ms() > until {
            break;
        }
    }
    Ok((sent, batches))
}

/// What a batch came to.
struct Batch {
    /// Whether its claim found fewer rows than it could take, and read
    /// them all: none was left past it.
    last: bool,
    copied: usize,
    /// Whether D1 took every row read.
    whole: bool,
    /// Whether a D1 call outlasted its deadline.
    late: bool,
}

/// What [`copy`] came to: the rows D1 holds, and those it refused alone;
/// any left untried (no call left, or D1 too slow: `late`) are neither.
struct Copied {
    copied: Vec<Row>,
    refused: Vec<Row>,
    late: bool,
}

/// Copies `rows` to D1, in bulk; where D1 refuses a copy, in halves, down to
/// the rows it refuses alone, spending `calls`, each call within `until`.
async fn copy(db: &Db, rows: Vec<Row>, until: i64, calls: &mut usize) -> Copied {
    let (mut copied, mut refused) = (Vec::new(), Vec::new());
    let mut parts = vec![rows];
    while let Some(mut part) = parts.pop() {
        let left = until - now_ms();
        if part.is_empty() || *calls == 0 || left <= 0 {
            continue;
        }
        *calls -= 1;
        let statements = d1_batch(&part);
        let call = pin!(db.batch(&statements));
        let timeout = pin!(Delay::from(Duration::from_millis(left.unsigned_abs())));
        let result = match select(call, timeout).await {
            Either::Left((result, _)) => result,
            // D1 too slow: not the rows' fault. They wait for the next
            // batch, a smaller one.
            Either::Right(_) => {
                return Copied {
                    copied,
                    refused,
                    late: true,
                }
            }
        };
        match result {
            Ok(()) => copied.append(&mut part),
            Err(e) if part.len() == 1 => {
                log::error(&Line::new("handoff_refused").detail(&part[0].key).error(e));
                refused.append(&mut part);
            }
            Err(_) => {
                let half = part.split_off(part.len() / 2);
                parts.extend([half, part]);
            }
        }
    }
    Copied {
        copied,
        refused,
        late: false,
    }
}

/// One batch, in one transaction that holds its rows with `FOR UPDATE SKIP
/// LOCKED`: claimed, copied to D1 (see [`copy`]), marked. A row D1 refuses
/// alone (or one unreadable) counts a try (see `tries`), so that it cannot
/// hold the others back.
async fn relay_batch(
    env: &Env,
    settings: &Settings,
    due: i64,
    size: Size,
    calls: &mut usize,
) -> Result<Batch, PgError> {
    // Well within the unit's deadline, so that what it learns (which rows
    // D1 takes, which it refuses) is kept. A slow claim leaves the copy less
    // time, and the next batch, halved, a smaller claim.
    let until = now_ms() + 3_000;
    with_client(env, async |client: &Client| {
        let claim: [(&(dyn ToSql + Sync), Type); 4] = [
            (&due, Type::INT8),
            (&size.rows, Type::INT8),
            (&STUCK_TRIES, Type::INT4),
            (&size.bytes, Type::INT8),
        ];
        let mut pipeline = Pipeline::new(client);
        let begun = begin(&mut pipeline);
        let claimed = pipeline.query(CLAIM_DUE, &claim);
        let mut answers = pipeline.answers().await;
        begun.check(&mut answers)?;
        let claimed = answers.take(claimed)?;
        let locked = claimed.first().map(|row| row.try_get::<_, i64>(6));
        let locked = usize::try_from(locked.transpose()?.unwrap_or(0)).unwrap_or(0);
        let last = locked == claimed.len() && locked < usize::try_from(size.rows).unwrap_or(0);
        let about: Vec<Claimed> = claimed.iter().filter_map(Claimed::of).collect();
        let (rows, unreadable) = read_all(claimed);
        let db = Db::from_env(env)?;
        let read = rows.len();
        // The probe and the alert keep their calls and time: a batch that
        // spent them all would count no try, and claim the same rows again.
        let mut copy_calls = *calls - KEPT_CALLS;
        let copy = copy(&db, rows, until - KEPT_MS, &mut copy_calls).await;
        let Copied {
            copied,
            refused,
            late,
        } = copy;
        *calls = copy_calls + KEPT_CALLS;
        let whole = copied.len() == read;
        let tried = counted(&db, settings, &about, unreadable, &refused, until, calls).await;
        let (kinds, keys): (Vec<&str>, Vec<&str>) = copied
            .iter()
            .map(|row| (row.kind.name(), row.key.as_str()))
            .unzip();
        let (tried_kinds, tried_keys): (Vec<&str>, Vec<&str>) = tried
            .iter()
            .map(|(kind, key)| (kind.as_str(), key.as_str()))
            .unzip();
        let now = now_ms();
        let mark: [(&(dyn ToSql + Sync), Type); 3] = [
            (&now, Type::INT8),
            (&kinds, Type::TEXT_ARRAY),
            (&keys, Type::TEXT_ARRAY),
        ];
        let tried: [(&(dyn ToSql + Sync), Type); 2] = [
            (&tried_kinds, Type::TEXT_ARRAY),
            (&tried_keys, Type::TEXT_ARRAY),
        ];
        let mut pipeline = Pipeline::new(client);
        let marked = pipeline.execute(MARK, &mark);
        let tried = pipeline.execute(TRIED, &tried);
        let committed = pipeline.commit();
        let mut answers = pipeline.answers().await;
        answers.take(marked)?;
        answers.take(tried)?;
        answers.take(committed)?;
        Ok(Batch {
            last,
            copied: copied.len(),
            whole,
            late,
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_halves_to_an_eighth_at_most() {
        let mut size = CLAIM;
        for _ in 0..HALVINGS {
            size = size.halved();
        }
        assert_eq!(
            size,
            Size {
                rows: 125,
                bytes: 125_000
            }
        );
    }
}
