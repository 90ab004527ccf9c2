//! Webhook providers: one file per provider, each behind [`Provider`].
//!
//! A provider knows two things about its requests and nothing about storage:
//! how to check the signature over the raw bytes, and where the provider puts
//! the event id that stays the same on every retry. To add one, write a file
//! beside `stripe.rs` implementing [`Provider`], its module line below and
//! its cargo feature in Cargo.toml, and a line to [`build`].

#[cfg(feature = "generic-hmac")]
mod generic_hmac;
#[cfg(feature = "github")]
mod github;
#[cfg(feature = "linear")]
mod linear;
#[cfg(feature = "paddle")]
mod paddle;
#[cfg(feature = "shopify")]
mod shopify;
#[cfg(feature = "slack")]
mod slack;
#[cfg(feature = "standard-webhooks")]
mod standard_webhooks;
#[cfg(feature = "stripe")]
mod stripe;
#[cfg(feature = "twilio")]
mod twilio;

#[cfg(not(any(
    feature = "stripe",
    feature = "github",
    feature = "standard-webhooks",
    feature = "shopify",
    feature = "slack",
    feature = "linear",
    feature = "paddle",
    feature = "twilio",
    feature = "generic-hmac"
)))]
compile_error!("build at least one provider: a feature such as `stripe` or `github`");

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::signature::{within_window, Secrets};
use crate::sources::SourceConfig;

/// A request as it arrived: its URL, header names lower-cased, the body
/// untouched.
pub struct RawRequest {
    /// The full URL the sender called (Twilio signs it).
    pub url: String,
    headers: Vec<(String, String)>,
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
/// that tests are deterministic.
pub struct VerifyContext<'a> {
    pub secrets: &'a Secrets,
    /// Seconds since the Unix epoch.
    pub now: u64,
    /// How far, in seconds, a signed timestamp may be from `now`.
    pub tolerance: u64,
}

/// What a verified request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// An event, to deduplicate and apply.
    Event(EventIdentity),
    /// A handshake the provider expects answered with this JSON body, not an
    /// event (Slack's `url_verification`).
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
pub struct EventIdentity {
    /// Stable across the provider's retries of this event.
    pub id: String,
    /// The event type, e.g. `checkout.session.completed` or `star.created`.
    pub kind: String,
}

/// What verification established about a request, kept with each delivery
/// so that operators can read it on the event's page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// ([`MAX_EVENT_ID_BYTES`]): not an id to name an inbox after.
    BadEventId,
}

/// The longest event id accepted. Providers' ids are a few dozen bytes
/// (Stripe `evt_…`, GitHub's UUIDs, Svix `msg_…`).
pub const MAX_EVENT_ID_BYTES: usize = 256;

/// The longest event type accepted (`checkout.session.completed`,
/// `pull_request`): the id and type travel to the inbox in its URL.
pub const MAX_EVENT_TYPE_BYTES: usize = 256;

impl Rejection {
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

pub trait Provider {
    /// The name effects are dispatched on (`"stripe"`, `"github"`, …).
    fn name(&self) -> &'static str;

    /// Whether a configured secret is usable (e.g. a `whsec_` one decodes).
    /// Checked when the secrets are loaded, so that a bad one is a named
    /// configuration error, not a stream of 401s.
    fn check_secret(&self, _secret: &[u8]) -> Result<(), String> {
        Ok(())
    }

    /// Checks the signature over the raw request. Runs before anything
    /// parses the body. Says how it was verified: the scheme, the position
    /// of the secret that matched, the signed time.
    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection>;

    /// Reads the event id and type. Only called on a verified request.
    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection>;

    /// Where the signature does not cover the event id (an unsigned
    /// header), the SHA-256 of what it does cover: the ledger fences on it
    /// too, so that a signed body resent under a fresh id is a duplicate.
    /// By default the raw body's (hex). `None` where the id is signed:
    /// there, two events may legitimately share a body, and only the id
    /// counts (and the body is not hashed at all).
    fn replay_fence(&self, req: &RawRequest) -> Option<String> {
        Some(crate::event::sha256_hex(&req.body))
    }
}

/// The registry: a source's `provider` setting to its verifier. Only the
/// generic HMAC provider reads further settings.
pub fn build(config: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(match config.provider.as_str() {
        #[cfg(feature = "stripe")]
        "stripe" => Box::new(stripe::Stripe),
        #[cfg(feature = "github")]
        "github" => Box::new(github::GitHub),
        #[cfg(feature = "standard-webhooks")]
        "standard-webhooks" => Box::new(standard_webhooks::StandardWebhooks::standard()),
        #[cfg(feature = "standard-webhooks")]
        "svix" => Box::new(standard_webhooks::StandardWebhooks::svix()),
        #[cfg(feature = "shopify")]
        "shopify" => Box::new(shopify::Shopify),
        #[cfg(feature = "slack")]
        "slack" => Box::new(slack::Slack),
        #[cfg(feature = "linear")]
        "linear" => Box::new(linear::Linear),
        #[cfg(feature = "paddle")]
        "paddle" => Box::new(paddle::Paddle),
        #[cfg(feature = "twilio")]
        "twilio" => Box::new(twilio::Twilio),
        #[cfg(feature = "generic-hmac")]
        "hmac" => Box::new(generic_hmac::GenericHmac::from_config(config)?),
        other => return Err(not_built(other)),
    })
}

/// Each provider and the cargo feature that builds it in.
const FEATURES: [(&str, &str); 10] = [
    ("stripe", "stripe"),
    ("github", "github"),
    ("standard-webhooks", "standard-webhooks"),
    ("svix", "standard-webhooks"),
    ("shopify", "shopify"),
    ("slack", "slack"),
    ("linear", "linear"),
    ("paddle", "paddle"),
    ("twilio", "twilio"),
    ("hmac", "generic-hmac"),
];

/// Why `build` has no verifier for `provider`: compiled out, or unknown.
fn not_built(provider: &str) -> ConfigError {
    match FEATURES.iter().find(|(name, _)| *name == provider) {
        Some((_, feature)) => ConfigError(format!(
            "provider {provider} is not built in: build with the `{feature}` cargo feature"
        )),
        None => ConfigError(
            "unknown provider: use stripe, github, standard-webhooks, svix, shopify, slack, linear, paddle, twilio or hmac".into(),
        ),
    }
}

/// A hex HMAC-SHA256 tag, after `prefix` (`sha256=`, `v0=`, or none):
/// anything else — a wrong prefix, bad hex, a wrong length — is malformed.
#[cfg(any(feature = "github", feature = "linear", feature = "slack"))]
fn hex_tag(header: &str, prefix: &str) -> Result<Vec<u8>, Rejection> {
    header
        .strip_prefix(prefix)
        .and_then(|h| hex::decode(h).ok())
        .filter(|tag| tag.len() == 32)
        .ok_or(Rejection::MalformedSignature)
}

/// The verdict on a request signed under `scheme`: the signature first —
/// nothing about a forged request is trusted, its timestamp included — then
/// the window, for schemes that sign a time. `signed_by` is the position of
/// the secret that matched, if one did.
fn verdict(
    scheme: &str,
    signed_by: Option<usize>,
    signed_at: Option<u64>,
    ctx: &VerifyContext,
) -> Result<Verified, Rejection> {
    let secret = signed_by.ok_or(Rejection::BadSignature)?;
    match signed_at {
        Some(at) if !within_window(at, ctx.now, ctx.tolerance) => {
            Err(Rejection::TimestampOutsideWindow)
        }
        _ => Ok(Verified {
            scheme: scheme.to_string(),
            secret,
            signed_at,
        }),
    }
}

/// Reads an event's id and type from a JSON body, at top-level fields.
/// Shared by the providers whose body carries both.
#[cfg(feature = "paddle")]
fn json_identity(
    req: &RawRequest,
    id_field: &str,
    type_field: &str,
) -> Result<EventIdentity, Rejection> {
    let value: serde_json::Value = req.json()?;
    let id = value
        .get(id_field)
        .and_then(serde_json::Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or(Rejection::MissingEventId)?;
    let kind = value
        .get(type_field)
        .and_then(serde_json::Value::as_str)
        .unwrap_or("event");
    Ok(EventIdentity {
        id: id.to_string(),
        kind: kind.to_string(),
    })
}

/// The event identity from headers, after checking the body is JSON.
#[cfg(feature = "shopify")]
fn header_identity(
    req: &RawRequest,
    id_header: &str,
    kind: Option<&str>,
) -> Result<Identity, Rejection> {
    let id = required_header(req, id_header).ok_or(Rejection::MissingEventId)?;
    req.json::<serde::de::IgnoredAny>()?;
    Ok(Identity::Event(EventIdentity {
        id: id.to_string(),
        kind: kind.unwrap_or("event").to_string(),
    }))
}

/// The first value of a header, treating an empty one as absent.
fn required_header<'a>(req: &'a RawRequest, name: &str) -> Option<&'a str> {
    req.header(name).map(str::trim).filter(|v| !v.is_empty())
}

/// What the providers' unit tests share: a request builder and a
/// verification context.
#[cfg(test)]
pub(crate) mod testing {
    use super::{RawRequest, VerifyContext};
    use crate::signature::Secrets;

    /// A request to `https://example.com/` with `body` and the headers given
    /// a value (a `None` leaves its header out).
    pub fn request(headers: &[(&str, Option<&str>)], body: &str) -> RawRequest {
        request_to("https://example.com/", headers, body)
    }

    /// [`request`], to `url`.
    pub fn request_to(url: &str, headers: &[(&str, Option<&str>)], body: &str) -> RawRequest {
        let headers = headers
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), (*value)?.to_string())));
        RawRequest::new(url, headers, body.as_bytes().to_vec())
    }

    /// Verification under `secrets` at `now` (seconds), with the default
    /// 300 s window.
    pub fn context(secrets: &Secrets, now: u64) -> VerifyContext<'_> {
        VerifyContext {
            secrets,
            now,
            tolerance: 300,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(provider: &str) -> SourceConfig {
        SourceConfig {
            provider: provider.into(),
            ..SourceConfig::default()
        }
    }

    #[test]
    fn an_unknown_provider_is_a_configuration_error_that_lists_them() {
        let error = build(&source("carrier-pigeon")).err().unwrap();
        assert!(
            error.0.starts_with("unknown provider: use stripe, github"),
            "{error}"
        );
    }

    /// Runs in `make test` with only Stripe and GitHub built in.
    #[cfg(all(
        feature = "stripe",
        not(feature = "twilio"),
        not(feature = "standard-webhooks")
    ))]
    #[test]
    fn a_provider_not_built_in_names_its_feature() {
        let error = build(&source("twilio")).err().unwrap();
        assert_eq!(
            error.0,
            "provider twilio is not built in: build with the `twilio` cargo feature"
        );
        let error = build(&source("svix")).err().unwrap();
        assert!(
            error.0.contains("`standard-webhooks` cargo feature"),
            "{error}"
        );
        assert!(build(&source("stripe")).is_ok());
    }
}
