//! The queue consumer: each message names one outbox row; the consumer
//! claims it, performs its call under the row's idempotency key, and
//! records the result — every write conditional on its claim still holding.

use futures_util::future::join_all;
use serde::Deserialize;
use worker::wasm_bindgen::JsValue;
use worker::{Env, MessageBatch, MessageExt, QueueRetryOptionsBuilder, RawMessage};

use super::notify_operator::{self, Alert};
use super::{enqueue_now, Action, Call, CallError, Job, OutboxStatus, Performed};
use crate::clock::now_ms;
use crate::config::{self, OutboxSettings, OUTBOX_DLQ_BINDING};
use crate::d1::{Db, Statement, Value};
use crate::fault::Fault;
use crate::log::{self, Line};

/// Performs a batch's messages, each its own row, concurrently: a slow
/// target must not hold up the rest.
pub async fn consume(batch: MessageBatch<JsValue>, env: &Env) -> worker::Result<()> {
    let settings = OutboxSettings::from_env(env)?;
    let rows = Rows(Db::from_env(env)?);
    let test_faults = config::test_faults(env);
    let jobs = batch
        .raw_iter()
        .map(|message| process(message, test_faults, &rows, env, &settings));
    join_all(jobs).await;
    Ok(())
}

async fn process(
    message: RawMessage,
    test_faults: bool,
    rows: &Rows,
    env: &Env,
    settings: &OutboxSettings,
) {
    let job: Option<Job> = message
        .body()
        .as_string()
        .and_then(|text| serde_json::from_str(&text).ok());
    let Some(job) = job else {
        log::error(&Line::new("outbox_bad_message").id(message.id()));
        message.ack();
        return;
    };
    let fault = job.fault.filter(|_| test_faults);
    match handle(&job.key, fault, rows, env, settings).await {
        Ok(Next::Ack) => message.ack(),
        Ok(Next::RetryIn(seconds)) => retry(&message, seconds),
        Err(e) => {
            // D1 unreachable or the like: nothing was decided; try again
            // after a jittered first backoff, not at once into an outage.
            let line = Line::new("outbox_error").idempotency_key(&job.key);
            log::error(&line.detail(e));
            retry(&message, settings.backoff_secs(1));
        }
    }
}

fn retry(message: &RawMessage, seconds: u32) {
    message.retry_with_options(
        &QueueRetryOptionsBuilder::new()
            .with_delay_seconds(seconds)
            .build(),
    );
}

/// What to tell the queue about a message.
enum Next {
    Ack,
    RetryIn(u32),
}

async fn handle(
    key: &str,
    fault: Option<Fault>,
    rows: &Rows,
    env: &Env,
    settings: &OutboxSettings,
) -> worker::Result<Next> {
    let now = now_ms();
    let Some(claim) = rows.claim(key, now, settings.lease_ms).await? else {
        let Some(current) = rows.current(key).await? else {
            return Ok(Next::Ack);
        };
        return Ok(
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
            },
        );
    };

    let call = Call {
        env,
        key,
        timeout_ms: settings.call_timeout_ms(),
    };
    let performed = match Action::from_stored(&claim.action) {
        Some(action) => action.perform(&claim.payload, &call).await,
        None => Err(CallError::UnknownAction),
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
            Ok(Next::RetryIn(1))
        }
        Ok(performed) => {
            let note = match performed {
                Performed::Sent => None,
                Performed::Skipped(why) => Some(format!("skipped: {why}")),
            };
            if claim.mark_sent(rows, note.clone()).await? {
                let line = line("outbox_sent");
                log::info(&match note {
                    Some(note) => line.detail(note),
                    None => line,
                });
            }
            Ok(Next::Ack)
        }
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
                alert.row(&notify_operator::settings(env), at)
            });
            let (alert, alert_key) = alert.unzip();
            let (dead, alerted) = claim.mark_dead(rows, &error, at, alert).await?;
            if dead {
                log::error(&line("outbox_dead").detail(&error));
                if let (true, Some(alert_key)) = (alerted, alert_key) {
                    enqueue_now(env, alert_key).await;
                }
                env.queue(OUTBOX_DLQ_BINDING)?
                    .send_raw(Job::message(key, 0, None)?)
                    .await?;
            }
            Ok(Next::Ack)
        }
        Err(error) => {
            let delay = settings.backoff_secs(claim.attempts);
            let due = now + i64::from(delay) * 1000;
            let rescheduled = claim.reschedule(rows, &error, due).await?;
            log::error(&line("outbox_failed").detail(&error));
            Ok(if rescheduled {
                Next::RetryIn(delay)
            } else {
                Next::Ack
            })
        }
    }
}

/// The outbox rows, as the consumer reads and writes them.
struct Rows(Db);

/// A row this consumer run claimed: the attempt number and lease the claim
/// wrote. Every completion is conditional on both, so a run whose lease
/// expired (stalled after its call) cannot overwrite the result of the run
/// that took the row over — not even when a requeue has reset the attempt
/// count since (the lease time tells the claims apart).
#[derive(Deserialize)]
struct Claimed {
    key: String,
    source: String,
    event_id: String,
    action: String,
    payload: String,
    attempts: i64,
    /// As stored: compared back exactly, whether D1 kept it as an integer
    /// or a real (it binds JS numbers).
    lease_until: f64,
}

/// A row that could not be claimed, as it is. Its status is read as text,
/// so that one this build does not know is acknowledged, not an error.
#[derive(Deserialize)]
struct Current {
    status: String,
    lease_until: Option<f64>,
    next_attempt_at: f64,
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
    async fn claim(&self, key: &str, now: i64, lease_ms: i64) -> worker::Result<Option<Claimed>> {
        self.0
            .row(&Statement::new(
                "UPDATE outbox SET status = 'sending', attempts = attempts + 1, \
                     lease_until = ?2 + ?3, updated_at = ?2 \
                 WHERE idempotency_key = ?1 \
                   AND ((status = 'pending' AND next_attempt_at <= ?2) \
                        OR (status = 'sending' AND lease_until < ?2)) \
                 RETURNING json_object('key', idempotency_key, 'source', source, \
                     'event_id', event_id, 'action', action, \
                     'payload', payload, 'attempts', attempts, 'lease_until', lease_until) AS json",
                vec![key.into(), now.into(), lease_ms.into()],
            ))
            .await
    }

    async fn current(&self, key: &str) -> worker::Result<Option<Current>> {
        self.0
            .row(&Statement::new(
                "SELECT json_object('status', status, 'lease_until', lease_until, \
                     'next_attempt_at', next_attempt_at) AS json \
                 FROM outbox WHERE idempotency_key = ?1",
                vec![key.into()],
            ))
            .await
    }
}

impl Claimed {
    async fn mark_sent(&self, rows: &Rows, note: Option<String>) -> worker::Result<bool> {
        let sql = complete!("status = 'sent', note = ?5");
        let values = vec![note.into()];
        Ok(self.complete(rows, sql, values, now_ms(), None).await?.0)
    }

    /// Dead as of `at`, and in the same transaction `alert` (a statement
    /// writing its row only where this claim made the row dead at `at`).
    /// Says whether the claim held, and whether the alert's row was written.
    async fn mark_dead(
        &self,
        rows: &Rows,
        error: &str,
        at: i64,
        alert: Option<Statement>,
    ) -> worker::Result<(bool, bool)> {
        let sql = complete!("status = 'dead', last_error = ?5");
        self.complete(rows, sql, vec![error.into()], at, alert)
            .await
    }

    /// Back to `pending`, due at `due` (ms).
    async fn reschedule(&self, rows: &Rows, error: &str, due: i64) -> worker::Result<bool> {
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

fn seconds_until(ms: i64) -> u32 {
    u32::try_from(ms.max(0) / 1000 + 1).unwrap_or(u32::MAX)
}
