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
/// sinks behind the others. (Index `webhook_outbox_due`.)
const CLAIM_DUE: &str = "SELECT kind, key, params, source, event_id, tries FROM webhook_outbox \
     WHERE handed_off_at IS NULL AND created_at <= $1 AND tries < $3 \
     ORDER BY tries, created_at LIMIT $2 FOR UPDATE SKIP LOCKED";

/// How many rows one relay transaction claims: one D1 call, when D1 takes
/// them all. A run's calls are few ([`CALLS`]), so this sets how fast a
/// backlog drains: 5,600 rows a run (BENCHMARKS.md). More needs a claim
/// sized by bytes, not rows: a row's payload has no cap.
const CLAIMED: i64 = 200;

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
        Ok(0) => {}
        Ok(sent) => log::info(&Line::new("handoff_relay").sent(sent)),
        // Logged once per isolate, as `store_behind`, naming the migration.
        Err(PgError::Behind(_)) => {}
        Err(e) => log::error(&Line::new("handoff_relay_failed").error(e.message())),
    }
}

/// The cron relay: hands off the rows left past `grace_ms` (each event's
/// rows, which its messages carried to D1, and any whose hand-off was cut
/// short),
/// [`CLAIMED`] at a time, until none is left or [`RELAY_BUDGET_MS`] is
/// spent. Returns how many it handed off.
async fn relay(env: &Env, settings: &Settings, grace_ms: i64) -> Result<usize, PgError> {
    let until = now_ms() + RELAY_BUDGET_MS;
    let (mut sent, mut calls) = (0, CALLS);
    while calls > KEPT_CALLS {
        let batch = relay_batch(env, settings, now_ms() - grace_ms, &mut calls).await?;
        sent += batch.copied;
        // A batch short of full, or one D1 did not take whole (D1 in
        // trouble, or a row it refuses): the rest waits for the next run.
        if batch.claimed < CLAIMED as usize || !batch.whole || now_ms() > until {
            break;
        }
    }
    Ok(sent)
}

/// What a batch came to.
struct Batch {
    claimed: usize,
    copied: usize,
    /// Whether D1 took every row read.
    whole: bool,
}

/// Copies `rows` to D1, in bulk; where D1 refuses a copy, in halves, down to
/// the rows it refuses alone, spending `calls`, each call within `until`.
/// Returns the rows D1 holds, and those it refused alone; any left untried
/// (no call left, or D1 too slow) are neither.
async fn copy(db: &Db, rows: Vec<Row>, until: i64, calls: &mut usize) -> (Vec<Row>, Vec<Row>) {
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
            // D1 too slow: not the rows' fault. They wait for the next run.
            Either::Right(_) => return (copied, refused),
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
    (copied, refused)
}

/// One batch, in one transaction that holds its rows with `FOR UPDATE SKIP
/// LOCKED`: claimed, copied to D1 (see [`copy`]), marked. A row D1 refuses
/// alone (or one unreadable) counts a try (see `tries`), so that it cannot
/// hold the others back. Returns how many rows it claimed, and how many it
/// handed off.
async fn relay_batch(
    env: &Env,
    settings: &Settings,
    due: i64,
    calls: &mut usize,
) -> Result<Batch, PgError> {
    // Well within the unit's deadline, so that what it learns (which rows
    // D1 takes, which it refuses) is kept.
    let until = now_ms() + 3_000;
    with_client(env, async |client: &Client| {
        let claim: [(&(dyn ToSql + Sync), Type); 3] = [
            (&due, Type::INT8),
            (&CLAIMED, Type::INT8),
            (&STUCK_TRIES, Type::INT4),
        ];
        let mut pipeline = Pipeline::new(client);
        let begun = begin(&mut pipeline);
        let claimed = pipeline.query(CLAIM_DUE, &claim);
        let mut answers = pipeline.answers().await;
        begun.check(&mut answers)?;
        let claimed = answers.take(claimed)?;
        let count = claimed.len();
        let about: Vec<Claimed> = claimed.iter().filter_map(Claimed::of).collect();
        let (rows, unreadable) = read_all(claimed);
        let db = Db::from_env(env)?;
        let read = rows.len();
        // The probe and the alert keep their calls and time: a batch that
        // spent them all would count no try, and claim the same rows again.
        let mut copy_calls = *calls - KEPT_CALLS;
        let (copied, refused) = copy(&db, rows, until - KEPT_MS, &mut copy_calls).await;
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
            claimed: count,
            copied: copied.len(),
            whole,
        })
    })
    .await
}
