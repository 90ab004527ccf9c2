//! The operators' surface, behind `ADMIN_TOKEN`: the JSON `api` at
//! `/admin/api/…` (a bearer token) and, with the `dashboard` feature, the
//! `dashboard` at `/admin` (a session cookie). With no `ADMIN_TOKEN` configured neither exists (404):
//! never open; with a weak one, both answer `500 misconfigured`. Every
//! presented token goes through [`crate::admin_guard`]'s throttle, and a
//! signed-out session stays refused.
//!
//! - [`queries`]: what both read from D1 and the inboxes, as typed rows;
//! - `handoff.rs`: what Postgres has yet to hand off to D1, for both;
//! - the dashboard's: `actions.rs` (Replay, Dismiss and Requeue), `pages.rs`
//!   (the overview and event pages), `finder.rs` (the page that finds
//!   events), `forwarding.rs` (destinations, and an event's deliveries), `summary.rs` (the overview's per-source sums), `html.rs` (the
//!   page shell, tables and escaping), `trend.rs` (the overview's charts).
//!
//! To add an endpoint: a query in `queries.rs` if it reads something new,
//! and an arm in `api::handle` (or `dashboard::handle`).

#[cfg(feature = "dashboard")]
mod actions;
#[cfg(feature = "admin")]
pub mod api;
#[cfg(feature = "dashboard")]
pub mod dashboard;
#[cfg(feature = "dashboard")]
mod finder;
#[cfg(feature = "dashboard")]
mod forwarding;
#[cfg(feature = "postgres")]
mod handoff;
#[cfg(feature = "dashboard")]
pub mod html;
#[cfg(feature = "dashboard")]
pub mod pages;
pub mod queries;
#[cfg(feature = "dashboard")]
mod summary;
#[cfg(feature = "dashboard")]
pub mod trend;

use worker::{js_sys, Env, Request, Response, Result};

use crate::admin_guard::{self, Verdict};
use crate::log::{self, Line};
use crate::settings::Settings;
use crate::signature::Tag;

/// Sets the headers every admin response carries, API and dashboard alike,
/// errors included: no framing (clickjacking), no scripts, styles only
/// inline, forms only to this origin, no referrer to other sites, no
/// content sniffing.
pub fn harden(response: Result<Response>) -> Result<Response> {
    let mut response = response.or_else(|e| {
        log::error(&Line::new("admin_error").error(e));
        Response::error("internal error", 500)
    })?;
    let headers = response.headers_mut();
    headers.set(
        "content-security-policy",
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    )?;
    headers.set("x-content-type-options", "nosniff")?;
    // Not `no-referrer`: with it, browsers send `Origin: null` on the
    // dashboard's own form posts, which the same-origin check must refuse.
    headers.set("referrer-policy", "same-origin")?;
    Ok(response)
}

/// Why the admin surface is closed.
pub enum Closed {
    /// No `ADMIN_TOKEN`: there is no admin surface (404), never an open one.
    Unset,
    /// A weak or mangled `ADMIN_TOKEN`: 500, logged naming the rule.
    Misconfigured,
}

/// The admin token, or why the admin surface is closed. Webhooks do not
/// depend on it: a bad token closes only this surface.
pub fn admin_token(settings: &Settings) -> std::result::Result<&str, Closed> {
    match &settings.admin_token {
        Ok(Some(token)) => Ok(token),
        Ok(None) => Err(Closed::Unset),
        Err(e) => {
            log::error(&Line::new("admin_misconfigured").detail(e));
            Err(Closed::Misconfigured)
        }
    }
}

/// The guard's verdict on a presented credential (`valid`: whether it
/// matched); a guard that cannot answer refuses, as 503.
pub async fn guard(
    env: &Env,
    settings: &Settings,
    req: &Request,
    valid: bool,
) -> std::result::Result<(), Denied> {
    match admin_guard::attempt(env, settings.test_faults, req, valid).await {
        Ok(Verdict::Allowed) => Ok(()),
        Ok(Verdict::Wrong) => {
            log::warn(&Line::new("admin_credential_refused"));
            Err(Denied::Wrong)
        }
        Ok(Verdict::Refused { retry_after_secs }) => {
            log::warn(&Line::new("admin_throttled"));
            Err(Denied::Throttled(retry_after_secs))
        }
        Err(e) => {
            log::error(&Line::new("admin_guard_failed").error(e));
            Err(Denied::Unavailable)
        }
    }
}

/// Why a presented credential did not let the request in.
pub enum Denied {
    Wrong,
    /// Too many failures from this client: come back in this many seconds.
    Throttled(i64),
    /// The guard did not answer.
    Unavailable,
}

impl Denied {
    pub fn status(&self) -> u16 {
        match self {
            Denied::Wrong => 401,
            Denied::Throttled(_) => 429,
            Denied::Unavailable => 503,
        }
    }

    /// `response`, with this status and, where the client should wait,
    /// `Retry-After`.
    pub fn answer(&self, response: Result<Response>) -> Result<Response> {
        let mut response = response?.with_status(self.status());
        let wait = match self {
            Denied::Throttled(secs) => Some(secs.to_string()),
            Denied::Unavailable => Some("5".into()),
            Denied::Wrong => None,
        };
        if let Some(wait) = wait {
            response.headers_mut().set("retry-after", &wait)?;
        }
        Ok(response)
    }
}

/// Whether `presented` is the token. Compares digests, not the strings:
/// constant time whatever the lengths.
pub fn token_matches(token: &str, presented: &str) -> bool {
    let expected = Tag::sha256(b"admin-token", &[token.as_bytes()]);
    let given = Tag::sha256(b"admin-token", &[presented.as_bytes()]);
    expected.matches(&given.bytes())
}

/// The token a request presents as `Authorization: Bearer <token>`, if
/// any: a request without one makes no guess, and is not counted.
#[cfg(feature = "admin")]
pub fn bearer(req: &Request) -> Option<String> {
    let header = req.headers().get("authorization").ok().flatten()?;
    let token = header.strip_prefix("Bearer ")?;
    (!token.is_empty()).then(|| token.to_string())
}

#[cfg(feature = "dashboard")]
/// What the session cookie holds: when it was issued (ms), and an HMAC of
/// that time under the token. The cookie is not the token, changes when the
/// token does, and cannot be made to look younger than it is.
pub fn session_value(token: &str, issued_at: i64) -> String {
    let issued = issued_at.to_string();
    let mac = Tag::sha256(
        token.as_bytes(),
        &[b"dashboard-session\n", issued.as_bytes()],
    );
    format!("{issued}.{}", mac.to_hex())
}

#[cfg(feature = "dashboard")]
/// Whether `value` is a cookie made by [`session_value`] under this token,
/// issued within `ttl_ms` of `now` and not in the future.
pub fn session_valid(value: &str, token: &str, now: i64, ttl_ms: i64) -> bool {
    let issued_at = value
        .split_once('.')
        .and_then(|(issued, _)| issued.parse::<i64>().ok());
    issued_at.is_some_and(|issued| {
        let fresh = issued <= now.saturating_add(60_000) && now.saturating_sub(issued) < ttl_ms;
        fresh && token_matches(&session_value(token, issued), value)
    })
}

#[cfg(feature = "dashboard")]
/// The token every dashboard form carries, for the session `session` (a
/// cookie value): an HMAC of it under the admin token. A cross-site page
/// cannot read it, so it cannot forge a form that passes [`form_token_ok`].
pub fn form_token(token: &str, session: &str) -> String {
    Tag::sha256(token.as_bytes(), &[b"dashboard-form\n", session.as_bytes()]).to_hex()
}

#[cfg(feature = "dashboard")]
/// Whether a posted form's token is the session's, in constant time.
pub fn form_token_ok(token: &str, session: &str, presented: &str) -> bool {
    let expected = Tag::sha256(token.as_bytes(), &[b"dashboard-form\n", session.as_bytes()]);
    hex::decode(presented).is_ok_and(|presented| expected.matches(&presented))
}

#[cfg(feature = "dashboard")]
/// A short name for a session in audit lines: a digest of its cookie, from
/// which neither the cookie nor the token can be recovered.
pub fn session_id(session: &str) -> String {
    crate::event::sha256_hex(session.as_bytes())[..16].to_string()
}

/// A path segment, percent-decoded (an event id may hold any character).
pub fn decode(segment: &str) -> String {
    js_sys::decode_uri_component(segment)
        .ok()
        .and_then(|s| s.as_string())
        .unwrap_or_else(|| segment.to_string())
}

/// A path segment, percent-encoded for a link or a form's action.
#[cfg(feature = "dashboard")]
pub fn encode(segment: &str) -> String {
    js_sys::encode_uri_component(segment).into()
}

/// The query string's parameters, decoded with `form_urlencoded`. (Not
/// through `Request::url`: parsing a `Url` brings IDNA's tables, about
/// 90 KB of gzipped wasm.)
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn of(req: &Request) -> Self {
        let url = req.inner().url();
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let query = query.split('#').next().unwrap_or_default();
        Query(
            form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    /// A parameter's value; an empty one counts as absent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// `limit`: 50 by default, 1 to 500.
    #[cfg(feature = "admin")]
    pub fn limit(&self) -> u32 {
        self.get("limit")
            .and_then(|l| l.parse::<u32>().ok())
            .unwrap_or(50)
            .clamp(1, 500)
    }
}

#[cfg(all(test, feature = "dashboard"))]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_valid_under_its_token_within_its_lifetime() {
        let cookie = session_value("token", 1_000_000);
        assert!(session_valid(&cookie, "token", 1_000_000, 60_000));
        assert!(session_valid(&cookie, "token", 1_059_999, 60_000));
        assert!(
            !session_valid(&cookie, "token", 1_060_000, 60_000),
            "expired"
        );
        assert!(
            !session_valid(&cookie, "other", 1_000_000, 60_000),
            "another token"
        );
        let future = session_value("token", 2_000_000);
        assert!(
            !session_valid(&future, "token", 1_000_000, 60_000),
            "from the future"
        );
        let forged = cookie.replacen("1000000", "1000001", 1);
        assert!(!session_valid(&forged, "token", 1_000_000, 60_000));
        assert!(!session_valid("garbage", "token", 1_000_000, 60_000));
    }

    #[test]
    fn a_form_token_is_the_sessions_own_under_the_admin_token() {
        let session = session_value("token", 1_000_000);
        let form = form_token("token", &session);
        assert!(form_token_ok("token", &session, &form));
        let other_session = session_value("token", 1_000_001);
        assert!(
            !form_token_ok("token", &other_session, &form),
            "another session's"
        );
        assert!(
            !form_token_ok("other", &session, &form),
            "under another token"
        );
        assert!(!form_token_ok("token", &session, ""), "missing");
        assert!(!form_token_ok("token", &session, &form[..62]), "truncated");
        assert!(!form_token_ok("token", &session, "not hex"));
        let id = session_id(&session);
        assert_eq!(id.len(), 16);
        assert!(!session.contains(&id) && !"token".contains(&id));
    }
}
