//! Webhook providers: one file per provider, each behind [`Provider`].
//!
//! A provider knows two things about its requests and nothing about storage:
//! how to check the signature over the raw bytes, and where the provider puts
//! the event id that stays the same on every retry. To add one, write a file
//! beside `stripe.rs` implementing [`Provider`] and add a line to [`by_name`].

mod github;
mod stripe;

pub use github::GitHub;
pub use stripe::Stripe;

use crate::signature::Secrets;

/// A request as it arrived: header names lower-cased, the body untouched.
pub struct RawRequest {
    headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawRequest {
    /// `headers` may come in any case; lookups are case-insensitive, as HTTP's are.
    pub fn new(headers: impl IntoIterator<Item = (String, String)>, body: Vec<u8>) -> Self {
        let headers = headers
            .into_iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value))
            .collect();
        RawRequest { headers, body }
    }

    /// The first value of a header; `name` must be lower-case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What verification needs besides the request. The clock is a parameter so
/// that tests are deterministic.
pub struct VerifyContext<'a> {
    pub secrets: &'a Secrets,
    /// Seconds since the Unix epoch.
    pub now: u64,
    /// How far, in seconds, a signed timestamp may be from `now`.
    pub tolerance: u64,
}

/// The provider's own name for an event, read after verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventIdentity {
    /// Stable across the provider's retries of this event.
    pub id: String,
    /// The event type, e.g. `checkout.session.completed` or `star.created`.
    pub kind: String,
}

/// Why a request was turned away. Each variant is something a caller (or an
/// operator reading the log) can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

impl Rejection {
    pub fn status(&self) -> u16 {
        match self {
            Rejection::MissingSignature
            | Rejection::MalformedSignature
            | Rejection::BadSignature
            | Rejection::TimestampOutsideWindow => 401,
            Rejection::MalformedBody(_) | Rejection::MissingEventId => 400,
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
        }
    }
}

pub trait Provider: Sync {
    /// The name effects are dispatched on (`"stripe"`, `"github"`).
    fn name(&self) -> &'static str;

    /// The variable holding this provider's secret(s).
    fn secret_var(&self) -> &'static str;

    /// Checks the signature over the raw request. Runs before anything
    /// parses the body.
    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<(), Rejection>;

    /// Reads the event id and type. Only called on a verified request.
    fn identify(&self, req: &RawRequest) -> Result<EventIdentity, Rejection>;
}

/// The registry: the `{source}` of `/webhooks/{source}` to its provider.
pub fn by_name(source: &str) -> Option<&'static dyn Provider> {
    match source {
        "stripe" => Some(&Stripe),
        "github" => Some(&GitHub),
        _ => None,
    }
}

/// The first value of a header, treating an empty one as absent.
fn required_header<'a>(req: &'a RawRequest, name: &str) -> Option<&'a str> {
    req.header(name).map(str::trim).filter(|v| !v.is_empty())
}
