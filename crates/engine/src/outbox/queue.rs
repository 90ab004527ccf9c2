//! Queue messages: a job names one row to perform (an outbox row, or a
//! forward delivery), sent in batches the queue accepts.

use serde::{Deserialize, Serialize};
use worker::wasm_bindgen::JsValue;
use worker::{Env, QueueContentType, RawMessageBuilder, SendMessage};

use crate::config::OUTBOX_BINDING;
use crate::fault::Fault;
use crate::log::{self, Line};

/// A queue message: which row to perform. `fault` is for the end-to-end
/// tests only (see [`Fault`]).
#[derive(Serialize, Deserialize)]
pub(crate) struct Job {
    pub(crate) key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fault: Option<Fault>,
}

impl Job {
    pub(crate) fn message(
        key: &str,
        delay_secs: u32,
        fault: Option<Fault>,
    ) -> worker::Result<SendMessage<JsValue>> {
        let job = serde_json::to_string(&Job {
            key: key.to_string(),
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

    /// The key of a message's body; `None` when it is not a job.
    pub(crate) fn key_of(body: &JsValue) -> Option<String> {
        let job: Job = serde_json::from_str(&body.as_string()?).ok()?;
        Some(job.key)
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
    if jobs.is_empty() {
        return Ok(());
    }
    let queue = env.queue(binding)?;
    for chunk in jobs.chunks(QUEUE_BATCH_LIMIT) {
        let messages = chunk
            .iter()
            .map(|(key, delay)| Job::message(key, *delay, fault))
            .collect::<worker::Result<Vec<_>>>()?;
        queue.send_raw_batch(messages).await?;
    }
    Ok(())
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
