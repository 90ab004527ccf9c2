//! `POST /webhooks/{source}`: the stateless half of a delivery.
//!
//! Cap the body, verify the signature on the raw bytes, read the provider's
//! event id, check the effect can be planned, then hand the event to its
//! inbox. Every delivery ends in one JSON reply and, at `LOG_LEVEL = "info"`
//! (or when refused or failed, at any level), one JSON log line.
//! A refusal wrote nothing: a 4xx for the request, a 500 for a
//! misconfiguration, a 503 `not_recorded` when the inbox certainly stored
//! nothing. One 503 is different: `unconfirmed`, when the inbox's answer was
//! lost and it may hold the event; a retry is then answered as its copy.

use std::rc::Rc;

use serde::Serialize;
use worker::{Context, Env, Headers, Request, Response, Result};

use crate::clock::now_ms;
use crate::config::{ConfigError, ReplyAfter};
use crate::event::{self, VerifiedEvent};
use crate::fault::Fault;
use crate::forward::Forward;
use crate::http::{self, BodyError};
use crate::inbox::client::{self, Answer, DeliveryError, Handoff};
use crate::inbox::state::Outcome;
use crate::providers::{self, Identity, RawRequest, Rejection, VerifyContext};
use crate::settings::Settings;
use crate::stats::{Counter, Due, Series};
use crate::{log, stats};

/// Why a delivery was not taken. Nothing was recorded in any of these cases
/// but `Unconfirmed`.
#[derive(Debug)]
enum Refusal {
    UnknownSource,
    TooLarge,
    Rejected(Rejection),
    Misconfigured(ConfigError),
    /// The body could not be read, or the inbox certainly stored nothing.
    NotRecorded(String),
    /// The inbox's answer was lost: it may hold the event.
    Unconfirmed(String),
}

impl Refusal {
    fn status(&self) -> u16 {
        match self {
            Refusal::UnknownSource => 404,
            Refusal::TooLarge => 413,
            Refusal::Rejected(rejection) => rejection.status(),
            Refusal::Misconfigured(_) => 500,
            Refusal::NotRecorded(_) | Refusal::Unconfirmed(_) => 503,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            Refusal::UnknownSource => "unknown_source",
            Refusal::TooLarge => "body_too_large",
            Refusal::Rejected(rejection) => rejection.reason(),
            Refusal::Misconfigured(_) => "misconfigured",
            Refusal::NotRecorded(_) => "not_recorded",
            Refusal::Unconfirmed(_) => "unconfirmed",
        }
    }

    /// Detail for the log line only: replies stay terse, so a prober learns
    /// nothing about the configuration.
    fn detail(&self) -> Option<String> {
        match self {
            Refusal::Rejected(Rejection::MalformedBody(detail)) => Some(detail.clone()),
            Refusal::Misconfigured(error) => Some(error.to_string()),
            Refusal::NotRecorded(error) | Refusal::Unconfirmed(error) => Some(error.clone()),
            _ => None,
        }
    }
}

impl From<Rejection> for Refusal {
    fn from(rejection: Rejection) -> Self {
        Refusal::Rejected(rejection)
    }
}

impl From<ConfigError> for Refusal {
    fn from(error: ConfigError) -> Self {
        Refusal::Misconfigured(error)
    }
}

impl From<BodyError> for Refusal {
    fn from(error: BodyError) -> Self {
        match error {
            BodyError::TooLarge => Refusal::TooLarge,
            BodyError::Unreadable(e) => Refusal::NotRecorded(e),
        }
    }
}

impl From<DeliveryError> for Refusal {
    fn from(error: DeliveryError) -> Self {
        match error {
            DeliveryError::NotRecorded(e) => Refusal::NotRecorded(e),
            DeliveryError::Unconfirmed(e) => Refusal::Unconfirmed(e),
            DeliveryError::Unplannable(why) => {
                Rejection::MalformedBody(format!("effect: {why}")).into()
            }
        }
    }
}

/// What the log line says about a delivery, filled in as it progresses.
#[derive(Default)]
struct Trace {
    key: Option<String>,
    kind: Option<String>,
    bytes: Option<usize>,
    /// The position of the secret that verified the delivery.
    secret: Option<usize>,
}

/// The one log line of a delivery. Field names are stable: dashboards and
/// `wrangler tail` filters rely on them. Never a secret, never the payload.
#[derive(Serialize)]
struct DeliveryLine<'a> {
    msg: &'static str,
    source: &'a str,
    key: Option<&'a str>,
    #[serde(rename = "type")]
    kind: Option<&'a str>,
    /// `processed`, `duplicate`, `accepted`, `failed`, `handshake` or `rejected`.
    outcome: &'static str,
    status: u16,
    /// Why it was rejected, or `replayed_body` for a duplicate whose signed
    /// body was applied under another id.
    reason: Option<&'static str>,
    /// For a replayed body: the key of the event it repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicate_of: Option<&'a str>,
    detail: Option<String>,
    bytes: Option<usize>,
    /// Which configured secret verified it (its position, never its value):
    /// when the old secret of a rotation stops appearing, retire it.
    secret: Option<usize>,
    latency_ms: i64,
}

/// The reply to the sender.
#[derive(Serialize)]
#[serde(untagged)]
enum Reply<'a> {
    Taken {
        outcome: &'static str,
        key: Option<&'a str>,
        /// `record` when the inbox answered once the event was recorded
        /// (`REPLY_AFTER`), its effect to follow; absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        reply_after: Option<&'static str>,
        /// `unavailable` when the store could not be reached (a 503): the
        /// event is stored, and its alarm retries it.
        #[serde(skip_serializing_if = "Option::is_none")]
        store: Option<&'static str>,
        /// `misconfigured` when the store lacks one of the engine's
        /// migrations (a 500): the event is stored, and its alarm retries
        /// it once the migration is applied.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'static str>,
        /// That migration's name (`engine_handoff_tries`).
        #[serde(skip_serializing_if = "Option::is_none")]
        missing_migration: Option<&'a str>,
    },
    Refused {
        error: &'static str,
    },
}

/// Receives one delivery to `source`, with the isolate's `settings`.
pub async fn handle(
    req: Request,
    env: &Env,
    settings: &Rc<Settings>,
    ctx: &Context,
    source: &str,
) -> Result<Response> {
    let started = now_ms();
    let mut trace = Trace::default();
    let result = receive(req, env, settings, source, &mut trace).await;
    let latency_ms = now_ms() - started;

    let key = trace.key.as_deref();
    // Stored, but the store is unreachable: the sender is asked to come
    // back when the alarm retries (503 with `Retry-After`).
    let retry_after_s = match &result {
        Ok(Taken::Event(answer)) => answer.retry_after_s,
        _ => None,
    };
    let missing_migration = match &result {
        Ok(Taken::Event(answer)) => answer.missing_migration.as_deref(),
        _ => None,
    };
    let (status, outcome, refusal) = match &result {
        Ok(Taken::Event(answer)) if missing_migration.is_some() => {
            (500, answer.outcome.name(), None)
        }
        Ok(Taken::Event(answer)) if retry_after_s.is_some() => (503, answer.outcome.name(), None),
        Ok(Taken::Event(answer)) => (200, answer.outcome.name(), None),
        Ok(Taken::Handshake(_)) => (200, "handshake", None),
        Err(refusal) => (refusal.status(), "rejected", Some(refusal)),
    };
    let replayed_body_of = match &result {
        Ok(Taken::Event(answer)) => answer.replayed_body_of.as_deref(),
        _ => None,
    };
    let recorded = matches!(&result, Ok(Taken::Event(answer)) if answer.recorded);
    let line = DeliveryLine {
        msg: "delivery",
        source,
        key,
        kind: trace.kind.as_deref(),
        outcome,
        status,
        reason: refusal
            .map(Refusal::reason)
            .or(replayed_body_of.map(|_| "replayed_body")),
        duplicate_of: replayed_body_of,
        detail: refusal.and_then(Refusal::detail),
        bytes: trace.bytes,
        secret: trace.secret,
        latency_ms,
    };
    // Every delivery at `info`; at any level one that was refused, failed,
    // or repeated a signed body under a fresh id (a replay attempt).
    if refusal.is_some() || outcome == Outcome::Failed.name() || replayed_body_of.is_some() {
        log::warn(&line);
    } else {
        log::info(&line);
    }
    if replayed_body_of.is_some() {
        stats::count(source, Counter::ReplayedBody);
    }
    if let Some(secret) = trace.secret {
        stats::count(source, Counter::Secret(secret));
    }
    // A first delivery answered once recorded counts as processed: its
    // effect follows, and `accepted` in the counters and the trend means
    // "an effect to be retried", a warning.
    let counted = if recorded {
        Outcome::Processed.name()
    } else {
        outcome
    };
    count(env, settings, ctx, source, counted, refusal);
    let reply = match (&result, refusal) {
        (Ok(Taken::Handshake(body)), _) => {
            let headers = Headers::new();
            headers.set("content-type", "application/json")?;
            return Ok(Response::ok(body.as_str())?.with_headers(headers));
        }
        (_, Some(refusal)) => Reply::Refused {
            error: refusal.reason(),
        },
        _ => Reply::Taken {
            outcome,
            key,
            reply_after: recorded.then_some(ReplyAfter::Record.name()),
            store: (retry_after_s.is_some() && missing_migration.is_none())
                .then_some("unavailable"),
            error: missing_migration.map(|_| "misconfigured"),
            missing_migration,
        },
    };
    let response = Response::from_json(&reply)?.with_status(status);
    if let Some(seconds) = retry_after_s {
        response
            .headers()
            .set("retry-after", &seconds.to_string())?;
    }
    Ok(response)
}

/// What became of a delivery that was not refused.
enum Taken {
    /// An event, handed to its inbox.
    Event(Answer),
    /// A provider's handshake (a URL check), answered with
    /// this JSON body. Not an event: nothing is stored.
    Handshake(String),
}

/// Counts the delivery for the operators' per-source counters (see
/// `stats`). Requests to sources that do not exist count under `(unknown)`,
/// so a prober cannot fill the table with names.
fn count(
    env: &Env,
    settings: &Rc<Settings>,
    ctx: &Context,
    source: &str,
    outcome: &str,
    refusal: Option<&Refusal>,
) {
    let source = match refusal {
        Some(Refusal::UnknownSource) => stats::UNKNOWN_SOURCE,
        _ => source,
    };
    stats::count(source, Counter::Received);
    match refusal {
        Some(refusal) => stats::count(source, Counter::Rejected(refusal.reason())),
        None => stats::count(source, Counter::Outcome(outcome)),
    }
    let now = now_ms();
    if let Some(series) = Series::of_delivery(outcome, refusal.is_some()) {
        stats::count_trend(now, source, series);
    }
    match stats::take_due(now as u64, settings.stats_flush_ms) {
        Due::Now(counts) => {
            ctx.wait_until(stats::flush(env.clone(), settings.clone(), counts, now))
        }
        Due::Later(sleeper) => {
            ctx.wait_until(stats::flush_later(env.clone(), settings.clone(), sleeper))
        }
        Due::Nothing => {}
    }
}

async fn receive(
    mut req: Request,
    env: &Env,
    settings: &Settings,
    source: &str,
    trace: &mut Trace,
) -> std::result::Result<Taken, Refusal> {
    let valid_name = !source.is_empty()
        && source
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    // Without the app, no effect is known: refuse, and the sender retries.
    let Some(app) = crate::app::get() else {
        log::error(&log::Line::new("engine_not_started").error(crate::app::NOT_STARTED));
        let _ = http::drain(&mut req, http::UNWANTED_BODY_MAX_BYTES).await;
        return Err(Refusal::NotRecorded(crate::app::NOT_STARTED.into()));
    };
    let found = if valid_name {
        settings.source(source, app.providers)?
    } else {
        None
    };
    let Some(found) = found else {
        // Drop a small body before refusing, so that the connection can
        // carry the sender's next request; a large one is not worth reading.
        let _ = http::drain(&mut req, http::UNWANTED_BODY_MAX_BYTES).await;
        return Err(Refusal::UnknownSource);
    };
    let (config, provider) = (&found.config, &found.provider);
    let limits = settings.limits()?;
    // A bad LOG_LEVEL refuses deliveries rather than pass unnoticed.
    (settings.log_level).ok_or_else(|| ConfigError("LOG_LEVEL must be info or warn".into()))?;
    // Read where an alert is due; checked here so that a bad value is a
    // refusal naming it, not an alert quietly sent on the defaults.
    settings.alerts()?;
    // An event is never acknowledged into an inbox or an outbox that
    // cannot run on these settings.
    settings.inbox()?;
    settings.outbox()?;

    let body = http::read_capped(&mut req, limits.max_body_bytes).await?;
    trace.bytes = Some(body.len());

    let raw = RawRequest::new(req.inner().url(), req.headers().entries(), body);
    let ctx = VerifyContext {
        secrets: &found.secrets,
        now: (now_ms() / 1000) as u64,
        tolerance: config.tolerance_secs.unwrap_or(limits.tolerance_secs),
    };
    let verified = provider.verify(&raw, &ctx)?;
    trace.secret = Some(verified.secret);
    let identity = match provider.identify(&raw)? {
        Identity::Event(identity) => identity,
        Identity::Handshake(reply) => return Ok(Taken::Handshake(reply)),
    };
    if identity.id.len() > providers::MAX_EVENT_ID_BYTES {
        return Err(Rejection::BadEventId.into());
    }
    if identity.kind.len() > providers::MAX_EVENT_TYPE_BYTES {
        let why = format!("event type over {} bytes", providers::MAX_EVENT_TYPE_BYTES);
        return Err(Rejection::MalformedBody(why).into());
    }
    trace.key = Some(event::dedupe_key(source, &identity.id));
    trace.kind = Some(identity.kind.clone());

    let fault = raw
        .header("x-test-fault")
        .filter(|_| limits.test_faults)
        .and_then(Fault::parse);
    // Checked before anything is stored: a destination that does not exist
    // or cannot sign refuses the delivery, never drops it later.
    let routes = settings.routes(source, &config.forward, &identity.kind)?;
    let forward = Forward::to(&routes, |name| raw.header(name));
    let fence = provider.replay_fence(&raw);
    let body = String::from_utf8(raw.body)
        .map_err(|_| Rejection::MalformedBody("body is not UTF-8".into()))?;
    let event = VerifiedEvent {
        source: source.to_string(),
        provider: provider.name().to_string(),
        id: identity.id,
        kind: identity.kind,
        fence,
        body,
        received_at: now_ms(),
        forward,
    };
    // The inbox plans the effect, once, and refuses an event it cannot
    // plan (it would fail every retry) while the sender can still see why.
    let handoff = Handoff {
        event,
        verified: Some(verified),
        fault,
        reply_after: found.reply_after,
    };
    Ok(Taken::Event(client::deliver(env, handoff).await?))
}
