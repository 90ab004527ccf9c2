//! Calling an inbox: the only code that knows its internal paths. The
//! worker hands it deliveries; the admin API and dashboard ask it for an
//! event's state, a replay or a dismissal. None of these paths is reachable
//! from outside: only the binding can call an object.

use serde::{Deserialize, Serialize};
use worker::{Env, Result, Stub};

use super::state::{EventState, Outcome};
use super::store::LoggedDelivery;
use crate::config::INBOX_BINDING;
#[cfg(any(feature = "admin", feature = "dashboard"))]
use crate::d1::Json;
use crate::event::{dedupe_key, is_source_name};
use crate::http;
use crate::providers::Verified;

/// `POST`: a verified delivery ([`Handoff`]) → [`Answer`]; 422 with the
/// reason when its effect cannot be planned, 400 when the handoff cannot be
/// read (nothing is stored either way).
pub(super) const DELIVER: &str = "/deliver";
/// `GET`: → [`InboxState`], 404 when the inbox holds nothing.
pub(super) const STATE: &str = "/state";
/// `GET`: → the body exactly as signed, with [`crate::event::VerifiedEvent::forward`] in
/// the [`FORWARD`] header; 404 when the inbox holds nothing.
pub(super) const BODY: &str = "/body";
/// The response header carrying [`crate::event::VerifiedEvent::forward`] (`{}` if none).
pub(super) const FORWARD: &str = "x-forward";
/// `POST`: an operator's replay → [`Answer`].
pub(super) const REPLAY: &str = "/replay";
/// `POST`: an operator's dismissal → [`Answer`]; 409 unless failed.
pub(super) const DISMISS: &str = "/dismiss";

/// The inbox's status for "the claim failed: nothing was stored".
pub(super) const NOT_STORED: u16 = 503;
/// The inbox's status for "this event's effect cannot be planned": the
/// event is refused, and nothing was stored.
pub(super) const UNPLANNABLE: u16 = 422;
/// The inbox's status for "the handoff could not be read" (a worker of
/// another version, during a deploy): nothing was stored.
pub(super) const BAD_HANDOFF: u16 = 400;

pub use super::handoff::Handoff;

/// An inbox's answer to a delivery, a replay or a dismissal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub outcome: Outcome,
    /// Set when the event's signed body was already applied under another
    /// id: the key (`"{source}:{id}"`) it duplicates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed_body_of: Option<String>,
    /// Answered once recorded (`REPLY_AFTER = "record"`): the effect
    /// follows. Absent from an inbox of an older release.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recorded: bool,
    /// Stored, but the store could not be reached: the alarm retries in
    /// this many seconds, and the sender is asked to come back then (503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<i64>,
    /// Stored, but the store lacks this migration of the engine's: the
    /// sender is told (500 `misconfigured`), and the alarm retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_migration: Option<String>,
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Self {
        Answer {
            outcome,
            replayed_body_of: None,
            recorded: false,
            retry_after_s: None,
            missing_migration: None,
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
    /// How the first delivery was verified (`None` for an event stored
    /// before this was kept).
    pub verified: Option<Verified>,
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
    /// The event's effect cannot be planned (why): refused, nothing stored.
    Unplannable(String),
}

/// Hands a verified event to its inbox and returns what the inbox did.
pub async fn deliver(env: &Env, handoff: Handoff) -> std::result::Result<Answer, DeliveryError> {
    let not_recorded = |e: worker::Error| DeliveryError::NotRecorded(e.to_string());
    let stub = stub(env, &handoff.event.key()).map_err(not_recorded)?;
    let target = format!("{}?{}", url(DELIVER), handoff.query());
    let request = http::post(&target, &handoff.event.body, &[]).map_err(not_recorded)?;
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
        BAD_HANDOFF => Err(DeliveryError::NotRecorded(format!(
            "the inbox could not read the handoff: {}",
            response.text().await.unwrap_or_default()
        ))),
        UNPLANNABLE => Err(DeliveryError::Unplannable(
            response
                .text()
                .await
                .unwrap_or_else(|e| format!("unreadable reason: {e}")),
        )),
        status => Err(DeliveryError::Unconfirmed(format!(
            "inbox answered {status}"
        ))),
    }
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// The event `(source, id)` as its inbox holds it; `None` when it answers
/// anything but 200 (it holds nothing: never received, or past retention).
pub async fn state(env: &Env, source: &str, id: &str) -> Result<Option<Json<InboxState>>> {
    let Some(stub) = event_stub(env, source, id)? else {
        return Ok(None);
    };
    let mut response = stub.fetch_with_str(&url(STATE)).await?;
    match response.status_code() {
        200 => Ok(Some(Json::new(response.text().await?)?)),
        _ => Ok(None),
    }
}

/// An event's body and its [`crate::event::VerifiedEvent::forward`], from its inbox;
/// `None` when it holds nothing (past `RETENTION`).
pub async fn body(env: &Env, source: &str, id: &str) -> Result<Option<(String, String)>> {
    let Some(stub) = event_stub(env, source, id)? else {
        return Ok(None);
    };
    let mut response = stub.fetch_with_str(&url(BODY)).await?;
    if response.status_code() != 200 {
        return Ok(None);
    }
    let forward = response.headers().get(FORWARD)?;
    let body = String::from_utf8(response.bytes().await?)
        .map_err(|_| worker::Error::RustError("inbox body: not UTF-8".into()))?;
    Ok(Some((body, forward.unwrap_or_else(|| "{}".into()))))
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// What an operator's action on an event came to. (The dashboard only
/// says "not done"; the API names the status.)
#[cfg_attr(not(feature = "admin"), allow(dead_code))]
pub enum ActionResult {
    Done(Answer),
    /// The inbox holds no such event.
    NoEvent,
    /// Only a failed event can be dismissed.
    NotFailed,
    /// The inbox answered this error status: not done.
    Failed(u16),
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// An operator's replay: the effect path again (a no-op if it committed).
pub async fn replay(env: &Env, source: &str, id: &str) -> Result<ActionResult> {
    act(env, source, id, REPLAY).await
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// An operator's decision not to apply a failed event.
pub async fn dismiss(env: &Env, source: &str, id: &str) -> Result<ActionResult> {
    act(env, source, id, DISMISS).await
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
async fn act(env: &Env, source: &str, id: &str, path: &str) -> Result<ActionResult> {
    let Some(stub) = event_stub(env, source, id)? else {
        return Ok(ActionResult::NoEvent);
    };
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

/// The inbox of `(source, id)` as an operator names them; `None` for a
/// name no source can have, whose key could be another event's.
fn event_stub(env: &Env, source: &str, id: &str) -> Result<Option<Stub>> {
    if !is_source_name(source) {
        return Ok(None);
    }
    stub(env, &dedupe_key(source, id)).map(Some)
}

fn url(path: &str) -> String {
    format!("https://inbox{path}")
}
