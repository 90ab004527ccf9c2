//! Queue messages: a job names one row to perform (an outbox row, or a
//! forward delivery), sent in batches the queue accepts. An event's first
//! messages may carry the rows D1 is owed of it (see `handoff_rows`).

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use worker::wasm_bindgen::JsValue;
use worker::{Env, QueueContentType, RawMessageBuilder, SendMessage};

use crate::config::{FORWARD_BINDING, OUTBOX_BINDING};
use crate::fault::Fault;
use crate::handoff_rows::{self, Riding, Row};
use crate::log::{self, Line};

/// A queue message: which row to perform, and the rows it carries for D1
/// (an older consumer ignores them: the relay copies them). `fault` is for
/// the end-to-end tests only (see [`Fault`]).
#[derive(Serialize, Deserialize)]
pub(crate) struct Job {
    pub(crate) key: String,
    /// Each read on its own (`handoff_rows::carried`), so that a row this
    /// build cannot read never costs the message its key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) rows: Vec<Json>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fault: Option<Fault>,
}

impl Job {
    pub(crate) fn message(
        key: &str,
        delay_secs: u32,
        fault: Option<Fault>,
        rows: &[Json],
    ) -> worker::Result<SendMessage<JsValue>> {
        let job = serde_json::to_string(&Job {
            key: key.to_string(),
            rows: rows.to_vec(),
            fault,
        })?;
        let message = RawMessageBuilder::new(JsValue::from_str(&job));
        let message = if delay_secs > 0 {
            message.delay_seconds(delay_secs)
        } else {
            message
        };
        Ok(message.build_with_content_type(QueueContentType::Text))
    }

    /// A message's body as a job; `None` when it is not one.
    pub(crate) fn read(body: &JsValue) -> Option<Job> {
        serde_json::from_str(&body.as_string()?).ok()
    }
}

/// The most messages one `sendBatch` call may carry (a Queues limit).
const QUEUE_BATCH_LIMIT: usize = 100;

/// Sends the rows' keys to the queue, in batches the queue accepts. A
/// failure here loses nothing: the rows are committed as `pending`, and the
/// cron relay sends them later.
pub async fn enqueue(env: &Env, keys: &[String], fault: Option<Fault>) -> worker::Result<()> {
    let jobs: Vec<(String, u32)> = keys.iter().map(|key| (key.clone(), 0)).collect();
    send_jobs(env, OUTBOX_BINDING, &jobs, fault).await
}

/// Sends `(key, delay in seconds)` jobs to the queue `binding`, in batches
/// the queue accepts.
pub(crate) async fn send_jobs(
    env: &Env,
    binding: &str,
    jobs: &[(String, u32)],
    fault: Option<Fault>,
) -> worker::Result<()> {
    let messages = jobs
        .iter()
        .map(|(key, delay)| Job::message(key, *delay, fault, &[]))
        .collect::<worker::Result<Vec<_>>>()?;
    send_messages(env, binding, messages).await
}

async fn send_messages(
    env: &Env,
    binding: &str,
    mut messages: Vec<SendMessage<JsValue>>,
) -> worker::Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let queue = env.queue(binding)?;
    while !messages.is_empty() {
        let rest = messages.split_off(messages.len().min(QUEUE_BATCH_LIMIT));
        queue
            .send_raw_batch(std::mem::replace(&mut messages, rest))
            .await?;
    }
    Ok(())
}

/// Sends an event's messages after its commit, never before: its outbox
/// rows' keys and its deliveries' ids, carrying the rows D1 is owed of it
/// (`owed`, none on D1). Rows that cannot ride are copied to D1 first. On
/// failure nothing is lost: the rows are committed, and the cron relays
/// copy and send them after their grace period.
pub(crate) async fn send_after_commit(
    env: &Env,
    outbox_keys: &[String],
    forward_ids: &[String],
    owed: &[Row],
    fault: Option<Fault>,
) -> worker::Result<()> {
    let riding = handoff_rows::ride(owed, outbox_keys, forward_ids);
    if riding.is_none() && fault != Some(Fault::NoHandOffCopy) {
        handoff_rows::deliver(env, owed).await;
    }
    let Riding { outbox, forwards } = riding.unwrap_or_default();
    let messages = |keys: &[String], rows: &[Vec<Json>], fault| {
        keys.iter()
            .enumerate()
            .map(|(i, key)| Job::message(key, 0, fault, rows.get(i).map_or(&[], Vec::as_slice)))
            .collect::<worker::Result<Vec<_>>>()
    };
    let forwarded = send_messages(
        env,
        FORWARD_BINDING,
        messages(forward_ids, &forwards, None)?,
    )
    .await;
    let fault = fault.and_then(Fault::for_outbox);
    send_messages(env, OUTBOX_BINDING, messages(outbox_keys, &outbox, fault)?)
        .await
        .and(forwarded)
}

/// Sends one committed row's key, now, best effort: on failure it is logged,
/// and the cron relay sends the row after its grace period.
pub async fn enqueue_now(env: &Env, key: String) {
    if let Err(e) = enqueue(env, std::slice::from_ref(&key), None).await {
        log::error(
            &Line::new("outbox_enqueue_failed")
                .idempotency_key(&key)
                .error(e),
        );
    }
}
