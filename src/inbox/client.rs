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
use crate::providers::Verified;

/// `POST`: a verified delivery ([`Handoff`]) → [`Answer`]; 422 with the
/// reason when its effect cannot be planned, 400 when the handoff cannot be
/// read (nothing is stored either way).
pub(super) const DELIVER: &str = "/deliver";
/// `GET`: → [`InboxState`], 404 when the inbox holds nothing.
pub(super) const STATE: &str = "/state";
/// `GET`: → the body exactly as signed, with [`VerifiedEvent::forward`] in
/// the [`FORWARD`] header; 404 when the inbox holds nothing.
pub(super) const BODY: &str = "/body";
/// The response header carrying [`VerifiedEvent::forward`] (`{}` if none).
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

/// What the worker sends an inbox with each delivery: the event's fields in
/// the query string, its body as the request body, exactly as signed. Not
/// inside JSON: a body escaped into a JSON string is copied and escaped
/// again on one side and unescaped on the other, which for a 1 MiB body
/// costs milliseconds (see BENCHMARKS.md).
pub struct Handoff {
    pub event: VerifiedEvent,
    /// How this delivery was verified; `None` from a worker of an older
    /// release, during a deploy.
    pub verified: Option<Verified>,
    pub fault: Option<Fault>,
}

impl Handoff {
    /// The query string carrying everything but the body.
    fn query(&self) -> String {
        let event = &self.event;
        let mut query = form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("source", &event.source)
            .append_pair("provider", &event.provider)
            .append_pair("id", &event.id)
            .append_pair("type", &event.kind)
            .append_pair("received_at", &event.received_at.to_string());
        if let Some(fence) = &event.fence {
            query.append_pair("fence", fence);
        }
        if let Some(forward) = &event.forward {
            query.append_pair("forward", forward);
        }
        if let Some(verified) = &self.verified {
            query
                .append_pair("scheme", &verified.scheme)
                .append_pair("secret", &verified.secret.to_string());
            if let Some(at) = verified.signed_at {
                query.append_pair("signed_at", &at.to_string());
            }
        }
        if let Some(fault) = self.fault {
            query.append_pair("fault", &fault.name());
        }
        query.finish()
    }

    /// Reads back what [`Handoff::query`] wrote, with the body.
    pub(super) fn from_parts(query: &str, body: String) -> std::result::Result<Handoff, String> {
        let (mut source, mut provider, mut id, mut kind, mut received_at) =
            (None, None, None, None, None);
        let (mut fence, mut fault, mut forward) = (None, None, None);
        let (mut scheme, mut secret, mut signed_at) = (None, None, None);
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.into_owned();
            match name.as_ref() {
                "source" => source = Some(value),
                "provider" => provider = Some(value),
                "id" => id = Some(value),
                "type" => kind = Some(value),
                "received_at" => received_at = value.parse().ok(),
                "fence" => fence = Some(value),
                "forward" => forward = Some(value),
                "scheme" => scheme = Some(value),
                "secret" => secret = Some(value.parse().map_err(|_| "handoff: bad secret")?),
                "signed_at" => {
                    signed_at = Some(value.parse().map_err(|_| "handoff: bad signed_at")?)
                }
                "fault" => fault = Some(Fault::parse(&value).ok_or("handoff: unknown fault")?),
                _ => {}
            }
        }
        let missing = |field: &str| format!("handoff: no {field}");
        Ok(Handoff {
            event: VerifiedEvent {
                source: source.ok_or_else(|| missing("source"))?,
                provider: provider.ok_or_else(|| missing("provider"))?,
                id: id.ok_or_else(|| missing("id"))?,
                kind: kind.ok_or_else(|| missing("type"))?,
                body,
                fence,
                received_at: received_at.ok_or_else(|| missing("received_at"))?,
                forward,
            },
            verified: match (scheme, secret, signed_at) {
                (Some(scheme), Some(secret), signed_at) => Some(Verified {
                    scheme,
                    secret,
                    signed_at,
                }),
                (None, None, None) => None,
                _ => return Err("handoff: a verification without its scheme or secret".into()),
            },
            fault,
        })
    }
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

/// An event's body and its [`VerifiedEvent::forward`], from its inbox;
/// `None` when it holds nothing (past `RETENTION`).
pub async fn body(env: &Env, source: &str, id: &str) -> Result<Option<(String, String)>> {
    let mut response = stub(env, &dedupe_key(source, id))?
        .fetch_with_str(&url(BODY))
        .await?;
    if response.status_code() != 200 {
        return Ok(None);
    }
    let forward = response.headers().get(FORWARD)?;
    let body = String::from_utf8(response.bytes().await?)
        .map_err(|_| worker::Error::RustError("inbox body: not UTF-8".into()))?;
    Ok(Some((body, forward.unwrap_or_else(|| "{}".into()))))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, fence: Option<&str>) -> VerifiedEvent {
        VerifiedEvent {
            source: "acme-eu".into(),
            provider: "example".into(),
            id: id.into(),
            kind: "order.paid & more".into(),
            body: "{\"id\":\"x\",\"note\":\"a \\\"quoted\\\" é\"}".into(),
            fence: fence.map(Into::into),
            received_at: 1_796_000_000_123,
            forward: Some(
                r#"{"to":["a b","c"],"headers":[["content-type","application/json; charset=utf-8"],["x-a","b&c=d"]]}"#.into(),
            ),
        }
    }

    #[test]
    fn a_handoff_reads_back_exactly_whatever_its_fields_hold() {
        let verified = |signed_at| {
            Some(Verified {
                scheme: "x-acme-signature: HMAC-SHA256 (hex) of timestamp.body & more".into(),
                secret: 1,
                signed_at,
            })
        };
        for (id, fence, verified, fault) in [
            ("evt_1", None, None, None),
            (
                "id with spaces, = & ? # % + and ünïcödé",
                Some("cd".repeat(32)),
                verified(Some(1_796_000_000)),
                None,
            ),
            (
                "evt_2",
                None,
                verified(None),
                Some(Fault::D1DownUntil(1_796_000_000_000)),
            ),
        ] {
            let sent = Handoff {
                event: event(id, fence.as_deref()),
                verified,
                fault,
            };
            let read = Handoff::from_parts(&sent.query(), sent.event.body.clone()).unwrap();
            assert_eq!(read.event, sent.event);
            assert_eq!(read.verified, sent.verified);
            assert_eq!(read.fault, sent.fault);
        }
    }

    #[test]
    fn a_handoff_missing_a_field_or_naming_an_unknown_fault_is_an_error() {
        let full = Handoff {
            event: event("evt_1", None),
            verified: None,
            fault: None,
        }
        .query();
        for field in ["source", "provider", "id", "type", "received_at"] {
            let query: String = full
                .split('&')
                .filter(|pair| !pair.starts_with(&format!("{field}=")))
                .collect::<Vec<_>>()
                .join("&");
            let error = Handoff::from_parts(&query, String::new()).err().unwrap();
            assert!(error.contains("handoff: no "), "{field}: {error}");
        }
        let bad_fault = format!("{full}&fault=no-such-fault");
        assert!(Handoff::from_parts(&bad_fault, String::new()).is_err());
        for half in ["scheme=x", "secret=1", "signed_at=1", "scheme=x&secret=-1"] {
            let query = format!("{full}&{half}");
            assert!(
                Handoff::from_parts(&query, String::new()).is_err(),
                "{half}"
            );
        }
        // A field of a later release is ignored: during a deploy, an inbox
        // may be older than the worker that calls it.
        let later = format!("{full}&added_by_a_later_release=1");
        assert!(Handoff::from_parts(&later, String::new()).is_ok());
    }
}
