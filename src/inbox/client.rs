//! Calling an inbox: the only code that knows its internal paths. The
//! worker hands it deliveries; the admin API and dashboard ask it for an
//! event's state, a replay or a dismissal. None of these paths is reachable
//! from outside: only the binding can call an object.

use serde::{Deserialize, Serialize};
use worker::{Env, Result, Stub};

use super::state::{EventState, Outcome};
use super::store::LoggedDelivery;
use crate::config::INBOX_BINDING;
use crate::d1::Json;
use crate::event::{dedupe_key, VerifiedEvent};
use crate::fault::Fault;
use crate::http;

/// `POST`: a verified delivery ([`Handoff`]) → [`Answer`].
pub(super) const DELIVER: &str = "/deliver";
/// `GET`: → [`InboxState`], 404 when the inbox holds nothing.
pub(super) const STATE: &str = "/state";
/// `POST`: an operator's replay → [`Answer`].
pub(super) const REPLAY: &str = "/replay";
/// `POST`: an operator's dismissal → [`Answer`]; 409 unless failed.
pub(super) const DISMISS: &str = "/dismiss";

/// The inbox's status for "the claim failed: nothing was stored".
pub(super) const NOT_STORED: u16 = 503;

/// What the worker sends an inbox with each delivery.
#[derive(Serialize, Deserialize)]
pub(super) struct Handoff {
    pub event: VerifiedEvent,
    pub fault: Option<Fault>,
}

/// An inbox's answer to a delivery, a replay or a dismissal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub outcome: Outcome,
    /// Set when the event's signed body was already applied under another
    /// id: the key (`"{source}:{id}"`) it duplicates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed_body_of: Option<String>,
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Self {
        Answer {
            outcome,
            replayed_body_of: None,
        }
    }
}

/// An inbox's event: its progress, its body, and its deliveries. Every
/// delivery passed signature verification: nothing else reaches an inbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InboxState {
    pub state: EventState,
    pub effect_attempts: i64,
    pub last_error: Option<String>,
    pub received_at: i64,
    pub done_at: Option<i64>,
    /// For a `failed` event: whether it is listed in `failed_events` yet.
    pub reported: bool,
    /// Every delivery received, the first included.
    pub deliveries: i64,
    /// The first delivery, then the last `DELIVERIES_KEPT` later ones.
    pub delivery_log: Vec<LoggedDelivery>,
    /// When the object's alarm fires next (ms): a retry, a report, or the
    /// retention deadline. Set while the event is held.
    pub next_wake_up_at: Option<i64>,
    /// The body exactly as signed.
    pub body: String,
}

/// Why a delivery did not get an answer from its inbox.
#[derive(Debug)]
pub enum DeliveryError {
    /// Certainly not stored: the request never left, or the inbox said its
    /// claim failed. The sender's retry starts clean.
    NotRecorded(String),
    /// The inbox may hold the event (its answer was lost). A retry is safe:
    /// it is answered as a copy of the held event.
    Unconfirmed(String),
}

/// Hands a verified event to its inbox and returns what the inbox did.
pub async fn deliver(
    env: &Env,
    event: VerifiedEvent,
    fault: Option<Fault>,
) -> std::result::Result<Answer, DeliveryError> {
    let not_recorded = |e: worker::Error| DeliveryError::NotRecorded(e.to_string());
    let stub = stub(env, &event.key()).map_err(not_recorded)?;
    let body = serde_json::to_string(&Handoff { event, fault })
        .map_err(|e| DeliveryError::NotRecorded(e.to_string()))?;
    let request = http::post(&url(DELIVER), &body, &[]).map_err(not_recorded)?;
    let mut response = stub
        .fetch_with_request(request)
        .await
        .map_err(|e| DeliveryError::Unconfirmed(e.to_string()))?;
    match response.status_code() {
        200 => response
            .json()
            .await
            .map_err(|e| DeliveryError::Unconfirmed(e.to_string())),
        NOT_STORED => Err(DeliveryError::NotRecorded(
            "the inbox could not claim".into(),
        )),
        status => Err(DeliveryError::Unconfirmed(format!(
            "inbox answered {status}"
        ))),
    }
}

/// The event `(source, id)` as its inbox holds it; `None` when it answers
/// anything but 200 (it holds nothing: never received, or past retention).
pub async fn state(env: &Env, source: &str, id: &str) -> Result<Option<Json<InboxState>>> {
    let mut response = stub(env, &dedupe_key(source, id))?
        .fetch_with_str(&url(STATE))
        .await?;
    match response.status_code() {
        200 => Ok(Some(Json::new(response.text().await?)?)),
        _ => Ok(None),
    }
}

/// What an operator's action on an event came to.
pub enum ActionResult {
    Done(Answer),
    /// The inbox holds no such event.
    NoEvent,
    /// Only a failed event can be dismissed.
    NotFailed,
    /// The inbox answered this error status: not done.
    Failed(u16),
}

/// An operator's replay: the effect path again (a no-op if it committed).
pub async fn replay(env: &Env, source: &str, id: &str) -> Result<ActionResult> {
    act(env, source, id, REPLAY).await
}

/// An operator's decision not to apply a failed event.
pub async fn dismiss(env: &Env, source: &str, id: &str) -> Result<ActionResult> {
    act(env, source, id, DISMISS).await
}

async fn act(env: &Env, source: &str, id: &str, path: &str) -> Result<ActionResult> {
    let stub = stub(env, &dedupe_key(source, id))?;
    let mut response = stub
        .fetch_with_request(http::post(&url(path), "", &[])?)
        .await?;
    match response.status_code() {
        200 => Ok(ActionResult::Done(response.json().await?)),
        404 => Ok(ActionResult::NoEvent),
        409 => Ok(ActionResult::NotFailed),
        status => Ok(ActionResult::Failed(status)),
    }
}

/// The inbox of the event keyed `"{source}:{id}"`.
fn stub(env: &Env, key: &str) -> Result<Stub> {
    env.durable_object(INBOX_BINDING)?.get_by_name(key)
}

fn url(path: &str) -> String {
    format!("https://inbox{path}")
}
