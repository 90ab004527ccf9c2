//! The queue consumer: each message names one outbox row. A batch's rows
//! are claimed in one statement, their calls made concurrently under each
//! row's idempotency key, and the calls that succeeded marked `sent` as
//! they end, together: two D1 calls for a batch whose calls end together,
//! not two per row. Every write is conditional on its claim still holding.

use futures_util::future::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use worker::wasm_bindgen::JsValue;
use worker::{Env, MessageBatch, MessageExt, QueueRetryOptionsBuilder, RawMessage};

use super::claims::{Claimed, Current, Rows};
use super::notify_operator::{self, Alert};
use super::{dead_letter, enqueue_now, Action, Call, Job, OutboxStatus, Performed};
use crate::clock::now_ms;
use crate::config::OutboxSettings;
use crate::d1::Db;
use crate::fault::Fault;
use crate::handoff_rows::{self, Row};
use crate::log::{self, Line};
use crate::settings::Settings;

/// Performs a batch's messages, each its own row, concurrently: a slow
/// target holds up neither the other calls nor their `sent` marks.
/// Performs a batch of outbox rows (their keys), each once.
pub async fn consume(
    batch: MessageBatch<JsValue>,
    env: &Env,
    engine: &Settings,
) -> worker::Result<()> {
    let settings = engine.outbox()?;
    let rows = Rows(Db::from_env(env)?);
    let mut jobs: Vec<(RawMessage, Job)> = Vec::new();
    // One message per row: a second for the same row (the relay's, or a
    // redelivery) is settled by the first, which writes the rows it
    // carried too; it is acknowledged once the batch is, or retried.
    let mut seconds: Vec<RawMessage> = Vec::new();
    let mut carried = Vec::new();
    for message in batch.raw_iter() {
        match Job::read(&message.body()) {
            Some(mut job) if jobs.iter().any(|(_, j)| j.key == job.key) => {
                carried.append(&mut job.rows);
                seconds.push(message);
            }
            Some(job) => jobs.push((message, job)),
            None => {
                log::error(&Line::new("outbox_bad_message").id(message.id()));
                message.ack();
            }
        }
    }
    if jobs.is_empty() {
        return Ok(());
    }
    let all = carried
        .iter()
        .chain(jobs.iter().flat_map(|(_, job)| &job.rows));
    let carried = handoff_rows::carried(all, now_ms());
    match settle(&jobs, &carried, &rows, env, engine).await {
        Ok(next) => {
            for ((message, _), next) in jobs.iter().zip(next) {
                match next {
                    Next::Ack => message.ack(),
                    Next::RetryIn(seconds) => retry(message, seconds),
                }
            }
            seconds.iter().for_each(RawMessage::ack);
        }
        Err(e) => {
            // D1 unreachable or the like: nothing was decided; try again
            // after a jittered first backoff, not at once into an outage.
            log::error(&Line::new("outbox_error").detail(e));
            for message in jobs.iter().map(|(message, _)| message).chain(&seconds) {
                retry(message, settings.backoff_secs(1));
            }
        }
    }
    Ok(())
}

fn retry(message: &RawMessage, seconds: u32) {
    message.retry_with_options(
        &QueueRetryOptionsBuilder::new()
            .with_delay_seconds(seconds)
            .build(),
    );
}

/// What to tell the queue about a message.
#[derive(Clone, Copy)]
enum Next {
    Ack,
    RetryIn(u32),
}

/// Claims the batch's rows (one per job), after writing those the
/// messages `carried` (see `handoff_rows`), performs what it
/// claimed, and records the results; says what to tell the queue about
/// each job, in order. A call's success is marked `sent` as soon as it is
/// known, with every other one known by then, in one statement: a slow
/// target holds up no other row's mark, and the common batch, whose calls
/// end together, costs one.
async fn settle(
    jobs: &[(RawMessage, Job)],
    carried: &[Row],
    rows: &Rows,
    env: &Env,
    engine: &Settings,
) -> worker::Result<Vec<Next>> {
    let settings = engine.outbox()?;
    let keys: Vec<&str> = jobs.iter().map(|(_, job)| job.key.as_str()).collect();
    let now = now_ms();
    let claimed = rows.claim(&keys, carried, now, settings.lease_ms).await?;
    let mut calls: FuturesUnordered<_> = claimed
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let job = jobs
                .iter()
                .map(|(_, job)| job)
                .find(|job| job.key == row.key);
            let fault = job.and_then(|job| job.fault).filter(|_| engine.test_faults);
            perform(row, fault, rows, env, engine).map(move |done| (i, done))
        })
        .collect();
    let mut decided: Vec<Option<Next>> = vec![None; claimed.len()];
    while let Some(first) = calls.next().await {
        let mut ended = vec![first];
        while let Some(Some(done)) = calls.next().now_or_never() {
            ended.push(done);
        }
        let sent: Vec<(&Claimed, Option<String>)> = ended
            .iter()
            .filter_map(|(i, done)| match done {
                Ok(Done::Sent(note)) => Some((&claimed[*i], note.clone())),
                _ => None,
            })
            .collect();
        let held = if sent.is_empty() {
            Ok(Vec::new())
        } else {
            rows.mark_sent(&sent, now_ms()).await
        };
        for (i, done) in ended {
            let next = recorded(&claimed[i], done, &held);
            decided[i] = Some(next.unwrap_or_else(|e| failed(&claimed[i].key, e, settings)));
        }
    }
    // The rows the claim skipped, looked up once the calls are done; if
    // that fails, only their messages are retried.
    let unclaimed: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|key| !claimed.iter().any(|row| row.key == *key))
        .collect();
    let current = if unclaimed.is_empty() {
        Ok(Vec::new())
    } else {
        rows.current(&unclaimed).await
    };
    let looked_at = now_ms();
    Ok(keys
        .iter()
        .map(|key| match claimed.iter().position(|row| row.key == *key) {
            Some(i) => decided[i].unwrap_or(Next::RetryIn(settings.backoff_secs(1))),
            None => match &current {
                Ok(current) => standing(current.iter().find(|row| row.key == *key), looked_at),
                Err(e) => failed(key, e.to_string(), settings),
            },
        })
        .collect())
}

/// What a claimed row's call came to, once its `sent` mark (`held`: the
/// keys whose claim held, or why the mark failed) is known.
fn recorded(
    row: &Claimed,
    done: worker::Result<Done>,
    held: &worker::Result<Vec<String>>,
) -> Result<Next, String> {
    let note = match (done, held) {
        (Ok(Done::Decided(next)), _) => return Ok(next),
        (Ok(Done::Sent(note)), Ok(_)) => note,
        (Ok(Done::Sent(_)), Err(e)) => return Err(e.to_string()),
        (Err(e), _) => return Err(e.to_string()),
    };
    let held = held.as_ref().is_ok_and(|keys| keys.contains(&row.key));
    let line = Line::new(if held {
        "outbox_sent"
    } else {
        "outbox_claim_lost"
    });
    let line = line.idempotency_key(&row.key).attempt(row.attempts);
    match (held, note) {
        (true, Some(note)) => log::info(&line.detail(note)),
        (true, None) => log::info(&line),
        (false, _) => log::error(&line),
    }
    Ok(Next::Ack)
}

/// D1 unreachable or the like: nothing was decided for `key`; its message
/// is tried again after a jittered first backoff, not at once into an
/// outage.
fn failed(key: &str, error: String, settings: &OutboxSettings) -> Next {
    log::error(&Line::new("outbox_error").idempotency_key(key).detail(error));
    Next::RetryIn(settings.backoff_secs(1))
}

/// What to do with a row the claim skipped, as it stands.
fn standing(current: Option<&Current>, now: i64) -> Next {
    let Some(current) = current else {
        return Next::Ack;
    };
    match (
        OutboxStatus::from_name(&current.status),
        current.lease_until,
    ) {
        // Held by another run: look again when its lease ends.
        (Some(OutboxStatus::Sending), Some(until)) => {
            Next::RetryIn(seconds_until(until as i64 - now))
        }
        // Not due yet (an early redelivery, relay or replay): then.
        (Some(OutboxStatus::Pending), _) => {
            Next::RetryIn(seconds_until(current.next_attempt_at as i64 - now))
        }
        // Sent, dead, or a status this build does not know: nothing to do.
        _ => Next::Ack,
    }
}

/// How a claimed row's call went.
enum Done {
    /// Made (or skipped, with this note): to be marked `sent`.
    Sent(Option<String>),
    /// Failed, or a test fault: already recorded, and what to tell the queue.
    Decided(Next),
}

/// Performs one claimed row's call. A failure is recorded here (the row
/// rescheduled, or dead once out of attempts); a success is left for the
/// batch's one `sent` update.
async fn perform(
    claim: &Claimed,
    fault: Option<Fault>,
    rows: &Rows,
    env: &Env,
    engine: &Settings,
) -> worker::Result<Done> {
    let settings = engine.outbox()?;
    let key = claim.key.as_str();
    let call = Call {
        env,
        settings: engine,
        key,
        timeout_ms: settings.call_timeout_ms(),
    };
    let performed = match claim.action.strip_prefix(super::custom::PREFIX) {
        Some(name) => super::custom::perform(name, &claim.payload, &call).await,
        None => match Action::from_stored(&claim.action) {
            Some(action) => action.perform(&claim.payload, &call).await,
            // A row written before the action was the app's own (an
            // engine the owner had edited): its performer, if registered.
            None => super::custom::perform(&claim.action, &claim.payload, &call).await,
        },
    }
    .map_err(|e| e.to_string());
    let first_attempt = claim.attempts == 1;
    if let (Some(Fault::PauseBeforeComplete(ms)), true) = (fault, first_attempt) {
        // A consumer stalled past its lease (tests only).
        worker::Delay::from(std::time::Duration::from_millis(ms.max(0) as u64)).await;
    }
    let line = |msg| Line::new(msg).idempotency_key(key).attempt(claim.attempts);
    match performed {
        Ok(_) if fault == Some(Fault::CrashAfterCall) && first_attempt => {
            // Simulates a crash after the call: the row stays claimed, and
            // the retry performs it again, with the same key.
            log::error(&line("outbox_test_crash"));
            Ok(Done::Decided(Next::RetryIn(1)))
        }
        Ok(Performed::Sent) => Ok(Done::Sent(None)),
        Ok(Performed::Skipped(why)) => Ok(Done::Sent(Some(format!("skipped: {why}")))),
        Err(error) if claim.attempts >= settings.max_attempts => {
            // The operators are alerted in the same transaction; an alert's
            // own death is only logged (no alert about an alert).
            let at = now_ms();
            let alert = (claim.action != Action::NotifyOperator.name()).then(|| {
                let alert = Alert::SideEffectDead {
                    source: &claim.source,
                    event_id: &claim.event_id,
                    action: &claim.action,
                    key,
                    attempts: claim.attempts,
                    error: &error,
                };
                alert.row(&notify_operator::settings(engine), at)
            });
            let (alert, alert_key) = alert.unzip();
            let (dead, alerted) = claim.mark_dead(rows, &error, at, alert).await?;
            if dead {
                log::error(&line("outbox_dead").detail(&error));
                if let (true, Some(alert_key)) = (alerted, alert_key) {
                    enqueue_now(env, alert_key).await;
                }
                // A copy that fails to go is sent by the cron relay.
                let fail = fault == Some(Fault::FailDeadLetter);
                let death = dead_letter::Death {
                    key: key.to_string(),
                    dead_at: at as f64,
                };
                if let Err(e) = dead_letter::send(env, &rows.0, &[death], fail, at).await {
                    log::error(&line("outbox_dead_letter_failed").error(e));
                }
            }
            Ok(Done::Decided(Next::Ack))
        }
        Err(error) => {
            let delay = settings.backoff_secs(claim.attempts);
            let due = now_ms() + i64::from(delay) * 1000;
            let rescheduled = claim.reschedule(rows, &error, due).await?;
            log::error(&line("outbox_failed").detail(&error));
            Ok(Done::Decided(if rescheduled {
                Next::RetryIn(delay)
            } else {
                Next::Ack
            }))
        }
    }
}

fn seconds_until(ms: i64) -> u32 {
    u32::try_from(ms.max(0) / 1000 + 1).unwrap_or(u32::MAX)
}
