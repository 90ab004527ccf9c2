//! Side effects through an outbox on Cloudflare Queues.
//!
//! An email or a third-party call cannot be rolled back, so it never runs in
//! the effect path. The effect batch writes it as intent — an `outbox` row —
//! in the same D1 transaction as the ledger row, so the intent exists exactly
//! when the effect does. After the commit the inbox sends the row's key to the
//! queue; the consumer here claims the row, performs the call with the row's
//! own idempotency key, and marks it sent.
//!
//! Every step may repeat, and none does harm twice:
//! - the queue delivers at least once, and the cron relay re-sends rows whose
//!   message was lost: the consumer claims a row with a conditional UPDATE, so
//!   one run performs it at a time, and a `sent` row is only acknowledged;
//! - a crash after the call but before `sent` re-performs the call with the
//!   *same* key (derived from source, event id and action, never from the
//!   attempt), and the provider's idempotency absorbs it.
//!
//! To add a side effect: a file like `notify_chat.rs` with `intent` (event
//! body → [`SideEffect`]) and `perform` (payload → HTTP call), an arm in
//! [`perform`], and the `intent` call in `effects::plan`.

pub mod notify_chat;
pub mod send_receipt;

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use worker::wasm_bindgen::JsValue;
use worker::{
    console_error, console_log, web_sys, D1Database, Date, Env, Fetch, MessageBatch, MessageExt,
    QueueContentType, QueueRetryOptionsBuilder, RawMessage, RawMessageBuilder,
};

use crate::config::{self, OutboxSettings, DB_BINDING, OUTBOX_BINDING, OUTBOX_DLQ_BINDING};
use crate::effects::{self, Statement};
use crate::event::VerifiedEvent;
use crate::http;

/// An intended side effect, produced while planning an event's effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideEffect {
    pub action: &'static str,
    /// JSON: everything the performer needs, fixed at planning time.
    pub payload: String,
    /// The business object it concerns, as `(kind, id)`, when there is one
    /// (the receipt of a checkout session). Its key is then derived from the
    /// object, not the event: the same purchase seen through two events or
    /// two sources (an endpoint migration) sends one receipt.
    pub about: Option<(&'static str, String)>,
}

impl SideEffect {
    pub fn new(action: &'static str, payload: &impl Serialize) -> Self {
        SideEffect {
            action,
            // Plain structs of strings: serialization cannot fail.
            payload: serde_json::to_string(payload).expect("payload serializes"),
            about: None,
        }
    }

    /// Keys the side effect by a business object (see [`SideEffect::about`]).
    pub fn about(mut self, kind: &'static str, id: &str) -> Self {
        self.about = Some((kind, id.to_string()));
        self
    }
}

/// How a performer ended.
pub enum Performed {
    Sent,
    /// Not configured, and the deployment said `SIDE_EFFECTS = "log"`:
    /// nothing to call. Marked sent, with this note, so that a local run
    /// with no accounts still completes.
    Skipped(&'static str),
}

/// A performer found its target's variable unset. Skipped only where the
/// deployment says so (`SIDE_EFFECTS = "log"`, as in `.dev.vars.example`);
/// anywhere else a failure that retries and dead-letters like any other, so
/// a deploy that forgot a variable cannot silently drop receipts.
pub fn unconfigured(env: &Env, note: &'static str) -> Result<Performed, String> {
    if config::text_is(env, "SIDE_EFFECTS", "log") {
        Ok(Performed::Skipped(note))
    } else {
        Err(format!(
            "{note} (set it, or SIDE_EFFECTS = \"log\" to skip)"
        ))
    }
}

/// What a performer needs besides its payload.
pub struct Call<'a> {
    pub env: &'a Env,
    /// The row's idempotency key, sent as `Idempotency-Key`.
    pub key: &'a str,
    /// When to give up on the target (see `OutboxSettings::call_timeout_ms`).
    pub timeout_ms: u32,
}

/// `sha256(source \n event id \n action)`, hex: the same for every attempt
/// and every copy of the event, and distinct per action.
pub fn idempotency_key(source: &str, event_id: &str, action: &str) -> String {
    let digest = Sha256::new()
        .chain_update(source)
        .chain_update("\n")
        .chain_update(event_id)
        .chain_update("\n")
        .chain_update(action)
        .finalize();
    hex::encode(digest)
}

/// A row keyed by a business object may exist already (written by another
/// event about the same object): then this one is not written again.
const INSERT_ROW: &str = "INSERT INTO outbox \
     (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?6) ON CONFLICT (idempotency_key) DO NOTHING";

/// The outbox row for a side effect, for the effect batch, and its key.
pub fn insert(event: &VerifiedEvent, side_effect: SideEffect, now: i64) -> (Statement, String) {
    let key = match &side_effect.about {
        Some((kind, id)) => idempotency_key(kind, id, side_effect.action),
        None => idempotency_key(&event.source, &event.id, side_effect.action),
    };
    let statement = Statement {
        sql: INSERT_ROW,
        params: vec![
            key.as_str().into(),
            event.source.as_str().into(),
            event.id.as_str().into(),
            side_effect.action.into(),
            side_effect.payload.into(),
            now.into(),
        ],
    };
    (statement, key)
}

/// A queue message: which row to perform. `fault` is for the end-to-end
/// tests only (see `inbox::Fault`).
#[derive(Serialize, Deserialize)]
struct Job {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: Option<String>,
}

/// The most messages one `sendBatch` call may carry (a Queues limit).
const QUEUE_BATCH_LIMIT: usize = 100;

/// Rows the cron relay re-sends per run: ten batches, so that a backlog left
/// by a lost queue (a local runtime killed with its messages in memory)
/// drains at 1,000 rows a minute, within a run's subrequest budget.
const RELAY_ROWS_PER_RUN: u32 = 1_000;

/// Sends the rows' keys to the queue, in batches the queue accepts. A
/// failure here loses nothing: the rows are committed as `pending`, and the
/// cron relay sends them later.
pub async fn enqueue(env: &Env, keys: &[String], fault: Option<&str>) -> worker::Result<()> {
    let queue = env.queue(OUTBOX_BINDING)?;
    for chunk in keys.chunks(QUEUE_BATCH_LIMIT) {
        let messages = chunk
            .iter()
            .map(|key| {
                let job = serde_json::to_string(&Job {
                    key: key.clone(),
                    fault: fault.map(str::to_string),
                })?;
                Ok(RawMessageBuilder::new(JsValue::from_str(&job))
                    .build_with_content_type(QueueContentType::Text))
            })
            .collect::<worker::Result<Vec<_>>>()?;
        queue.send_raw_batch(messages).await?;
    }
    Ok(())
}

/// The cron relay: re-sends rows that are due but whose message was lost —
/// `pending` past their due time, or `sending` past their lease — once they
/// are older than the grace period; up to `RELAY_ROWS_PER_RUN` a run, oldest
/// first. It moves each re-sent row's due time to now, so a backlog that is
/// only slow (a deployed queue behind a struggling consumer) is re-sent once
/// per grace period, not on every run.
pub async fn relay(env: &Env) -> worker::Result<()> {
    let settings = OutboxSettings::from_env(env).map_err(|e| e.to_string())?;
    let db = env.d1(DB_BINDING)?;
    let now = now();
    let cutoff = now - settings.relay_grace_ms;
    let rows = db
        .prepare(
            "UPDATE outbox SET next_attempt_at = ?2 WHERE idempotency_key IN (\
                 SELECT idempotency_key FROM outbox \
                 WHERE (status = 'pending' AND next_attempt_at <= ?1) \
                    OR (status = 'sending' AND lease_until <= ?1 AND next_attempt_at <= ?1) \
                 ORDER BY next_attempt_at LIMIT ?3) \
             RETURNING idempotency_key",
        )
        .bind(&[
            (cutoff as f64).into(),
            (now as f64).into(),
            RELAY_ROWS_PER_RUN.into(),
        ])?
        .raw::<String>()
        .await?;
    let keys: Vec<String> = rows.into_iter().flatten().collect();
    enqueue(env, &keys, None).await?;
    if !keys.is_empty() {
        console_log!(r#"{{"msg":"outbox_relay","sent":{}}}"#, keys.len());
    }
    Ok(())
}

/// The queue consumer: each message is one row to perform.
pub async fn consume(batch: MessageBatch<JsValue>, env: &Env) -> worker::Result<()> {
    let settings = OutboxSettings::from_env(env).map_err(|e| e.to_string())?;
    let db = env.d1(DB_BINDING)?;
    let test_faults = config::test_faults(env);
    // Each message is its own row: a slow target must not hold up the rest.
    let jobs = batch
        .raw_iter()
        .map(|message| process(message, test_faults, &db, env, &settings));
    join_all(jobs).await;
    Ok(())
}

async fn process(
    message: RawMessage,
    test_faults: bool,
    db: &D1Database,
    env: &Env,
    settings: &OutboxSettings,
) {
    let job: Option<Job> = message
        .body()
        .as_string()
        .and_then(|text| serde_json::from_str(&text).ok());
    let Some(job) = job else {
        console_error!(r#"{{"msg":"outbox_bad_message","id":"{}"}}"#, message.id());
        message.ack();
        return;
    };
    let fault = job.fault.as_deref().filter(|_| test_faults);
    match handle(&job.key, fault, db, env, settings).await {
        Ok(Next::Ack) => message.ack(),
        Ok(Next::RetryIn(seconds)) => message.retry_with_options(
            &QueueRetryOptionsBuilder::new()
                .with_delay_seconds(seconds)
                .build(),
        ),
        Err(e) => {
            // D1 unreachable or the like: nothing was decided; try again
            // after a jittered first backoff, not at once into an outage.
            console_error!(
                "{}",
                log_line("outbox_error", &job.key, None, Some(&e.to_string()))
            );
            message.retry_with_options(
                &QueueRetryOptionsBuilder::new()
                    .with_delay_seconds(settings.backoff_secs(1))
                    .build(),
            );
        }
    }
}

/// What to tell the queue about a message.
enum Next {
    Ack,
    RetryIn(u32),
}

#[derive(Deserialize)]
struct Claimed {
    action: String,
    payload: String,
    attempts: i64,
    /// As stored: compared back exactly, whether D1 kept it as an integer
    /// or a real (it binds JS numbers).
    lease_until: f64,
}

#[derive(Deserialize)]
struct Current {
    status: String,
    lease_until: Option<f64>,
    next_attempt_at: f64,
}

async fn handle(
    key: &str,
    fault: Option<&str>,
    db: &D1Database,
    env: &Env,
    settings: &OutboxSettings,
) -> worker::Result<Next> {
    let now = now();
    // The claim: only one consumer run holds a row at a time, and only once
    // it is due; a crashed run's lease expires and the row can be claimed
    // again.
    let claimed: Option<Claimed> = json_row(
        db.prepare(
            "UPDATE outbox SET status = 'sending', attempts = attempts + 1, \
                 lease_until = ?2 + ?3, updated_at = ?2 \
             WHERE idempotency_key = ?1 \
               AND ((status = 'pending' AND next_attempt_at <= ?2) \
                    OR (status = 'sending' AND lease_until < ?2)) \
             RETURNING json_object('action', action, 'payload', payload, 'attempts', attempts, \
                 'lease_until', lease_until) AS row",
        )
        .bind(&[
            key.into(),
            (now as f64).into(),
            (settings.lease_ms as f64).into(),
        ])?,
    )
    .await?;

    let Some(row) = claimed else {
        let current: Option<Current> = json_row(
            db.prepare(
                "SELECT json_object('status', status, 'lease_until', lease_until, \
                     'next_attempt_at', next_attempt_at) AS row \
                 FROM outbox WHERE idempotency_key = ?1",
            )
            .bind(&[key.into()])?,
        )
        .await?;
        return Ok(match current {
            // Held by another run: look again when its lease ends.
            Some(Current {
                status,
                lease_until: Some(until),
                ..
            }) if status == "sending" => Next::RetryIn(seconds_until(until as i64 - now)),
            // Not due yet (an early redelivery, relay or replay): then.
            Some(Current {
                status,
                next_attempt_at,
                ..
            }) if status == "pending" => Next::RetryIn(seconds_until(next_attempt_at as i64 - now)),
            // Sent, dead, or unknown: nothing to do.
            _ => Next::Ack,
        });
    };

    let call = Call {
        env,
        key,
        timeout_ms: settings.call_timeout_ms(),
    };
    let claim = Claim {
        db,
        key,
        attempts: row.attempts,
        lease_until: row.lease_until,
    };
    let performed = perform(&row.action, &row.payload, &call).await;
    if let Some(ms) = fault
        .and_then(|f| f.strip_prefix("pause-before-complete:"))
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|_| row.attempts == 1)
    {
        // A consumer stalled past its lease (tests only).
        worker::Delay::from(std::time::Duration::from_millis(ms)).await;
    }
    match performed {
        Ok(_) if fault == Some("crash-after-call") && row.attempts == 1 => {
            // Simulates a crash after the call: the row stays claimed, and
            // the retry performs it again, with the same key.
            console_error!(
                "{}",
                log_line("outbox_test_crash", key, Some(row.attempts), None)
            );
            Ok(Next::RetryIn(1))
        }
        Ok(performed) => {
            let note = match performed {
                Performed::Sent => None,
                Performed::Skipped(why) => Some(format!("skipped: {why}")),
            };
            let note_value = note.as_deref().map_or(JsValue::NULL, JsValue::from_str);
            if claim
                .complete("status = 'sent', note = ?5", &[note_value])
                .await?
            {
                console_log!(
                    "{}",
                    log_line("outbox_sent", key, Some(row.attempts), note.as_deref())
                );
            }
            Ok(Next::Ack)
        }
        Err(error) if row.attempts >= settings.max_attempts => {
            if claim
                .complete("status = 'dead', last_error = ?5", &[error.as_str().into()])
                .await?
            {
                console_error!(
                    "{}",
                    log_line("outbox_dead", key, Some(row.attempts), Some(&error))
                );
                let job = serde_json::to_string(&Job {
                    key: key.to_string(),
                    fault: None,
                })?;
                env.queue(OUTBOX_DLQ_BINDING)?
                    .send_raw(
                        RawMessageBuilder::new(JsValue::from_str(&job))
                            .build_with_content_type(QueueContentType::Text),
                    )
                    .await?;
            }
            Ok(Next::Ack)
        }
        Err(error) => {
            let delay = settings.backoff_secs(row.attempts);
            let due = ((now + i64::from(delay) * 1000) as f64).into();
            let rescheduled = claim
                .complete(
                    "status = 'pending', last_error = ?5, next_attempt_at = ?6",
                    &[error.as_str().into(), due],
                )
                .await?;
            console_error!(
                "{}",
                log_line("outbox_failed", key, Some(row.attempts), Some(&error))
            );
            Ok(if rescheduled {
                Next::RetryIn(delay)
            } else {
                Next::Ack
            })
        }
    }
}

/// A row this consumer run claimed: its key, and the attempt number and
/// lease the claim wrote. Every completion is conditional on all three, so
/// a run whose lease expired (stalled after its call) cannot overwrite the
/// result of the run that took the row over — not even when a requeue has
/// reset the attempt count since (the lease time tells the claims apart).
struct Claim<'a> {
    db: &'a D1Database,
    key: &'a str,
    attempts: i64,
    lease_until: f64,
}

impl Claim<'_> {
    /// Sets `assignments` (which may use `?5`, `?6` for `values`), clears
    /// the lease, and says whether the claim still held.
    async fn complete(&self, assignments: &str, values: &[JsValue]) -> worker::Result<bool> {
        let sql = format!(
            "UPDATE outbox SET {assignments}, lease_until = NULL, updated_at = ?3 \
             WHERE idempotency_key = ?1 AND status = 'sending' AND attempts = ?2 \
               AND lease_until = ?4"
        );
        let mut params = vec![
            self.key.into(),
            (self.attempts as f64).into(),
            (now() as f64).into(),
            self.lease_until.into(),
        ];
        params.extend_from_slice(values);
        let changes = effects::changed_rows(self.db.prepare(&sql).bind(&params)?).await?;
        if changes == 0 {
            console_error!(
                "{}",
                log_line("outbox_claim_lost", self.key, Some(self.attempts), None)
            );
        }
        Ok(changes > 0)
    }
}

/// Dispatches to the performer of an action.
async fn perform(action: &str, payload: &str, call: &Call<'_>) -> Result<Performed, String> {
    match action {
        send_receipt::ACTION => send_receipt::perform(payload, call).await,
        notify_chat::ACTION => notify_chat::perform(payload, call).await,
        other => Err(format!("no performer for action '{other}'")),
    }
}

/// POSTs JSON with the idempotency key, aborted after the call's timeout.
/// Any answer but 2xx is a failure to retry. Errors are fixed phrases and a
/// status code: the runtime's own error text can quote the URL, and webhook
/// URLs carry tokens.
async fn post_json(
    url: &str,
    body: &str,
    call: &Call<'_>,
    bearer: Option<&str>,
) -> Result<(), String> {
    let authorization = bearer.map(|token| format!("Bearer {token}"));
    let mut headers = vec![
        ("content-type", "application/json"),
        ("idempotency-key", call.key),
    ];
    headers.extend(authorization.as_deref().map(|a| ("authorization", a)));
    let request = http::post(url, body, &headers).map_err(|_| "invalid target URL".to_string())?;
    let signal = web_sys::AbortSignal::timeout_with_u32(call.timeout_ms);
    let response = Fetch::Request(request)
        .send_with_signal(&signal.clone().into())
        .await
        .map_err(|_| {
            if signal.aborted() {
                format!("target timed out after {} ms", call.timeout_ms)
            } else {
                "target unreachable".to_string()
            }
        })?;
    match response.status_code() {
        200..=299 => Ok(()),
        status => Err(format!("target answered {status}")),
    }
}

/// The one row of a statement that returns `json_object(…) AS row`, decoded
/// with serde_json (see `inbox::json_rows` for why).
async fn json_row<T: for<'de> Deserialize<'de>>(
    statement: worker::D1PreparedStatement,
) -> worker::Result<Option<T>> {
    match statement.first::<String>(Some("row")).await? {
        Some(json) => Ok(Some(serde_json::from_str(&json)?)),
        None => Ok(None),
    }
}

fn seconds_until(ms: i64) -> u32 {
    u32::try_from(ms.max(0) / 1000 + 1).unwrap_or(u32::MAX)
}

fn log_line(msg: &str, key: &str, attempt: Option<i64>, detail: Option<&str>) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        msg: &'a str,
        idempotency_key: &'a str,
        attempt: Option<i64>,
        detail: Option<&'a str>,
    }
    serde_json::to_string(&Line {
        msg,
        idempotency_key: key,
        attempt,
        detail,
    })
    .unwrap_or_default()
}

fn now() -> i64 {
    Date::now().as_millis() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_stable_and_distinct_per_action() {
        let a = idempotency_key("stripe", "evt_1", "send_receipt");
        assert_eq!(a, idempotency_key("stripe", "evt_1", "send_receipt"));
        assert_eq!(a.len(), 64);
        assert_ne!(a, idempotency_key("stripe", "evt_1", "notify_chat"));
        assert_ne!(a, idempotency_key("stripe", "evt_2", "send_receipt"));
        // The separator keeps ("a", "bc") and ("ab", "c") apart.
        assert_ne!(
            idempotency_key("a", "bc", "x"),
            idempotency_key("ab", "c", "x")
        );
    }

    #[test]
    fn the_key_is_sha256_of_the_joined_parts() {
        // printf 'stripe\nevt_1\nsend_receipt' | sha256sum
        assert_eq!(
            idempotency_key("stripe", "evt_1", "send_receipt"),
            "c24ffbe2d9f222eedd6924aa2653c6edb063bbc154ec4d72a33cd74a11830edf"
        );
    }
}
