//! What a provider reads and what it answers: the request as it arrived,
//! the verified identity of its event, and the reasons a request is refused.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::signature::Secrets;

/// A request as it arrived: its URL, header names lower-cased, the body
/// untouched.
#[non_exhaustive]
pub struct RawRequest {
    /// The full URL the sender called (some providers sign it).
    pub url: String,
    headers: Vec<(String, String)>,
    /// The body's bytes, exactly as they arrived: what signatures cover.
    pub body: Vec<u8>,
}

impl RawRequest {
    /// `headers` may come in any case; lookups are case-insensitive, as HTTP's are.
    pub fn new(
        url: impl Into<String>,
        headers: impl IntoIterator<Item = (String, String)>,
        body: Vec<u8>,
    ) -> Self {
        let headers = headers
            .into_iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value))
            .collect();
        RawRequest {
            url: url.into(),
            headers,
            body,
        }
    }

    /// The first value of a header; `name` must be lower-case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON of type `T` (a provider's envelope keeps only the
    /// fields it names). Read as text, like every other JSON this worker
    /// parses, so that serde_json's parser is compiled for one input type
    /// only (see BENCHMARKS.md, sizes).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Rejection> {
        let text = std::str::from_utf8(&self.body)
            .map_err(|_| Rejection::MalformedBody("body is not UTF-8".into()))?;
        serde_json::from_str(text).map_err(|e| Rejection::MalformedBody(e.to_string()))
    }
}

/// What verification needs besides the request. The clock is a parameter so
/// that tests are deterministic (see [`testing::context`](super::testing::context)).
#[non_exhaustive]
pub struct VerifyContext<'a> {
    /// The source's secrets, tried in order (rotation).
    pub secrets: &'a Secrets,
    /// Seconds since the Unix epoch.
    pub now: u64,
    /// How far, in seconds, a signed timestamp may be from `now`.
    pub tolerance: u64,
}

/// What a verified request is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Identity {
    /// An event, to deduplicate and apply.
    Event(EventIdentity),
    /// A handshake the provider expects answered with this JSON body, not an
    /// event (a URL check).
    Handshake(String),
}

#[cfg(test)]
impl Identity {
    /// The event, for tests that expect one.
    pub fn expect_event(self) -> EventIdentity {
        match self {
            Identity::Event(event) => event,
            Identity::Handshake(body) => panic!("a handshake, not an event: {body}"),
        }
    }
}

/// The provider's own name for an event, read after verification.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventIdentity {
    /// Stable across the provider's retries of this event.
    pub id: String,
    /// The event type, as the provider names it.
    pub kind: String,
}

impl EventIdentity {
    /// The event `id` (stable across retries) of type `kind`.
    pub fn new(id: impl Into<String>, kind: impl Into<String>) -> Self {
        EventIdentity {
            id: id.into(),
            kind: kind.into(),
        }
    }
}

/// What verification established about a request, kept with each delivery
/// so that operators can read it on the event's page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Verified {
    /// The scheme that checked it: the header, and what its MAC covers.
    pub scheme: String,
    /// The position of the configured secret that verified it (never its
    /// value): when the old secret of a rotation stops appearing, retire it.
    pub secret: usize,
    /// The time the signature covers (seconds since the epoch), for
    /// schemes that sign one: how old the request was when it arrived.
    pub signed_at: Option<u64>,
}

/// Why a request was turned away. Each variant is something a caller (or an
/// operator reading the log) can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The signature header is absent or empty.
    MissingSignature,
    /// The signature header is present but cannot be read.
    MalformedSignature,
    /// Well-formed, but no configured secret produced it.
    BadSignature,
    /// Authentic, but signed too long ago (a replay) or in the future.
    TimestampOutsideWindow,
    /// Authentic, but the body is not what this provider sends.
    MalformedBody(String),
    /// Authentic, but it carries no event id to deduplicate on.
    MissingEventId,
    /// Authentic, but its event id is longer than any provider's
    /// (256 bytes): not an id to name an inbox after.
    BadEventId,
}

/// The longest event id accepted. Providers' ids are a few dozen bytes
/// (`evt_…`, UUIDs, `msg_…`).
pub(crate) const MAX_EVENT_ID_BYTES: usize = 256;

/// The longest event type accepted (`invoice.paid`, `pull_request`): the
/// id and type travel to the inbox in its URL.
pub(crate) const MAX_EVENT_TYPE_BYTES: usize = 256;

impl Rejection {
    /// The HTTP status the sender gets: 401 for a signature, 400 for a body.
    pub fn status(&self) -> u16 {
        match self {
            Rejection::MissingSignature
            | Rejection::MalformedSignature
            | Rejection::BadSignature
            | Rejection::TimestampOutsideWindow => 401,
            Rejection::MalformedBody(_) | Rejection::MissingEventId | Rejection::BadEventId => 400,
        }
    }

    /// A stable, machine-readable reason for replies and log lines.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::MissingSignature => "missing_signature",
            Rejection::MalformedSignature => "malformed_signature",
            Rejection::BadSignature => "bad_signature",
            Rejection::TimestampOutsideWindow => "timestamp_outside_window",
            Rejection::MalformedBody(_) => "malformed_body",
            Rejection::MissingEventId => "missing_event_id",
            Rejection::BadEventId => "bad_event_id",
        }
    }
}
