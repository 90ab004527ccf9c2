//! `[vars.DESTINATIONS]`: where verified events are forwarded. Parsed once
//! per isolate (see `settings`) and checked on every delivery that
//! forwards, so that a wrong setting is a `500 misconfigured` naming it
//! before anything is stored, never an event acknowledged and then
//! dropped.
//!
//! ```toml
//! [vars.DESTINATIONS]
//! backend = { url = "https://api.example.com/webhooks", secret = "BACKEND_SIGNING_SECRET", events = ["invoice.*"] }
//! [vars.SOURCES]
//! billing = { provider = "<provider>", forward = ["backend"] }
//! ```

use serde::Deserialize;
use serde_json::value::RawValue;
use worker::Env;

use super::sign::signing_keys;
use crate::config::{self, duration_ms, is_http_url, without_values, ConfigError, Entries, DAY_MS};

/// How long a delivery is retried by default: as long as providers retry
/// their own deliveries (3 days is common).
const DEFAULT_MAX_AGE_MS: i64 = 3 * DAY_MS;
const DEFAULT_TIMEOUT_MS: u32 = 10_000;
/// By default `max_age` is what ends the retries, not a count.
const DEFAULT_MAX_ATTEMPTS: i64 = 100;
/// One destination as written in `wrangler.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    url: String,
    secret: String,
    events: Option<Vec<String>>,
    timeout_ms: Option<u32>,
    max_attempts: Option<i64>,
    max_age: Option<String>,
    headers: Option<Vec<String>>,
}

/// A destination, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub name: String,
    pub url: String,
    /// The variable holding its Standard Webhooks key(s).
    pub secret_var: String,
    /// Globs on the event type; `None`: every type.
    pub events: Option<Vec<String>>,
    pub timeout_ms: u32,
    pub max_attempts: i64,
    pub max_age_ms: i64,
    /// Original request headers passed through, lower-case.
    pub headers: Vec<String>,
}

impl Destination {
    /// Whether an event of type `kind` goes here.
    pub fn wants(&self, kind: &str) -> bool {
        self.events
            .as_ref()
            .is_none_or(|globs| globs.iter().any(|glob| glob_matches(glob, kind)))
    }

    /// The signing keys: several during a rotation, each signing.
    pub fn keys(&self, env: &Env) -> Result<Vec<Vec<u8>>, ConfigError> {
        signing_keys(&self.secret_var, &config::secret(env, &self.secret_var)?)
    }
}

/// What bounds a destination's settings.
pub struct Bounds {
    /// A body must still be in its inbox when the last retry reads it.
    pub retention_ms: i64,
    /// A call must end well before another consumer may take it over.
    pub max_timeout_ms: u32,
}

/// Every destination, by name; none when `DESTINATIONS` is unset. Not
/// inlined: the async functions that call it would each carry a copy.
#[inline(never)]
pub fn all(env: &Env, bounds: &Bounds) -> Result<Vec<Destination>, ConfigError> {
    match config::table(env, "DESTINATIONS")? {
        Some(entries) => check_all(entries, bounds),
        None => Ok(Vec::new()),
    }
}

/// The destination called `name`, if declared.
pub fn named<'a>(all: &'a [Destination], name: &str) -> Option<&'a Destination> {
    all.iter().find(|d| d.name == name)
}

/// Each destination checked, in the order written.
fn check_all(entries: Entries, bounds: &Bounds) -> Result<Vec<Destination>, ConfigError> {
    entries
        .into_iter()
        .map(|(name, value)| check(&name, &value, bounds))
        .collect()
}

fn check(name: &str, value: &RawValue, bounds: &Bounds) -> Result<Destination, ConfigError> {
    let setting = |what: &str| format!("DESTINATIONS.{name}{what}");
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !valid_name {
        return Err(ConfigError(format!(
            "{}: a name is 1 to 64 of a-z, 0-9, - and _",
            setting("")
        )));
    }
    let written: Written = serde_json::from_str(value.get()).map_err(|e| {
        let why = without_values(&e.to_string());
        ConfigError(format!("{}: {why}", setting("")))
    })?;
    if !is_http_url(written.url.trim()) {
        return Err(ConfigError(format!(
            "{} must be an http(s) URL",
            setting(".url")
        )));
    }
    if !config::is_variable_name(&written.secret) {
        return Err(ConfigError(format!(
            "{} must name a variable (A-Z, 0-9, _), not hold the secret",
            setting(".secret")
        )));
    }
    let max_age_ms = match written.max_age.as_deref() {
        None => DEFAULT_MAX_AGE_MS,
        Some(text) => duration_ms(text).filter(|ms| *ms > 0).ok_or_else(|| {
            ConfigError(format!(
                "{} must be a duration like 3d, 12h or 90s",
                setting(".max_age")
            ))
        })?,
    };
    if max_age_ms > bounds.retention_ms {
        return Err(ConfigError(format!(
            "{} is longer than RETENTION: the body would be gone before the last retry",
            setting(".max_age")
        )));
    }
    let timeout_ms = written.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout_ms == 0 || timeout_ms > bounds.max_timeout_ms {
        return Err(ConfigError(format!(
            "{} must be 1 to {} (half of OUTBOX_LEASE_MS)",
            setting(".timeout_ms"),
            bounds.max_timeout_ms
        )));
    }
    let max_attempts = written.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if max_attempts < 1 {
        return Err(ConfigError(format!(
            "{} must be 1 or more",
            setting(".max_attempts")
        )));
    }
    let headers = written.headers.unwrap_or_default();
    if headers.iter().any(|h| !is_header_name(h)) {
        return Err(ConfigError(format!(
            "{} must list header names",
            setting(".headers")
        )));
    }
    Ok(Destination {
        name: name.to_string(),
        url: written.url.trim().to_string(),
        secret_var: written.secret,
        events: written.events,
        timeout_ms,
        max_attempts,
        max_age_ms,
        headers: headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
    })
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `*` matches any run of characters, dots included; anything else itself.
fn glob_matches(glob: &str, text: &str) -> bool {
    let (glob, text) = (glob.as_bytes(), text.as_bytes());
    let (mut g, mut t) = (0, 0);
    // Where the last `*` was, and where in `text` it resumes matching.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match glob.get(g) {
            Some(b'*') => {
                star = Some((g, t));
                g += 1;
            }
            Some(&c) if c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                Some((star_g, star_t)) => {
                    star = Some((star_g, star_t + 1));
                    g = star_g + 1;
                    t = star_t + 1;
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        retention_ms: 30 * DAY_MS,
        max_timeout_ms: 30_000,
    };

    fn parse(json: &str) -> Result<Vec<Destination>, ConfigError> {
        let entries: Vec<(String, Box<RawValue>)> =
            serde_json::from_str::<std::collections::BTreeMap<String, Box<RawValue>>>(json)
                .unwrap()
                .into_iter()
                .collect();
        check_all(entries, &BOUNDS)
    }

    fn one(json: &str) -> Result<Destination, ConfigError> {
        parse(&format!(r#"{{"backend":{json}}}"#)).map(|mut all| all.remove(0))
    }

    #[test]
    fn the_issue_s_form_reads_with_its_defaults() {
        let d = one(r#"{"url":"https://api.example.com/webhooks","secret":"BACKEND_SIGNING_SECRET","events":["checkout.session.*","invoice.*"]}"#).unwrap();
        assert_eq!(d.url, "https://api.example.com/webhooks");
        assert_eq!(d.secret_var, "BACKEND_SIGNING_SECRET");
        assert_eq!(
            (d.timeout_ms, d.max_attempts, d.max_age_ms),
            (10_000, 100, 3 * DAY_MS)
        );
        assert!(d.wants("checkout.session.completed"));
        assert!(d.wants("invoice.paid"));
        assert!(!d.wants("customer.created"));
        assert!(!d.wants("checkout.sessions"));
    }

    #[test]
    fn no_events_means_every_type() {
        let d = one(r#"{"url":"http://127.0.0.1:9000/","secret":"S","headers":["X-Request-Id"]}"#)
            .unwrap();
        assert!(d.wants("anything.at.all"));
        assert_eq!(d.headers, ["x-request-id"]);
    }

    #[test]
    fn bad_settings_are_named_without_their_values() {
        for (json, says) in [
            (
                r#"{"url":"ftp://x","secret":"S"}"#,
                "DESTINATIONS.backend.url must be an http(s) URL",
            ),
            (
                r#"{"url":"https://x","secret":"whsec_c2VjcmV0"}"#,
                "DESTINATIONS.backend.secret must name a variable",
            ),
            (
                r#"{"url":"https://x","secret":"S","max_age":"31d"}"#,
                "DESTINATIONS.backend.max_age is longer than RETENTION",
            ),
            (
                r#"{"url":"https://x","secret":"S","max_age":"soon"}"#,
                "DESTINATIONS.backend.max_age must be a duration",
            ),
            (
                r#"{"url":"https://x","secret":"S","timeout_ms":60000}"#,
                "DESTINATIONS.backend.timeout_ms must be 1 to 30000",
            ),
            (
                r#"{"url":"https://x","secret":"S","max_attempts":0}"#,
                "DESTINATIONS.backend.max_attempts must be 1 or more",
            ),
            (
                r#"{"url":"https://x","secret":"S","headers":["a b"]}"#,
                "DESTINATIONS.backend.headers must list header names",
            ),
            (
                r#"{"url":"https://x","secret":"S","evnets":[]}"#,
                "DESTINATIONS.backend: unknown field `evnets`",
            ),
            (
                r#"{"url":"https://x"}"#,
                "DESTINATIONS.backend: missing field `secret`",
            ),
            (
                r#"{"url":"https://x","secret":"S","events":"whsec_c2VjcmV0"}"#,
                "DESTINATIONS.backend: invalid type: string",
            ),
        ] {
            let error = one(json).unwrap_err().0;
            assert!(error.starts_with(says), "{json}: {error}");
            assert!(!error.contains("c2VjcmV0"), "{error}");
        }
        let error = parse(r#"{"Back End":{"url":"https://x","secret":"S"}}"#).unwrap_err();
        assert!(
            error.0.contains("DESTINATIONS.Back End: a name is"),
            "{}",
            error.0
        );
    }

    #[test]
    fn globs_match_runs_of_anything() {
        for (glob, text, matches) in [
            ("*", "", true),
            ("*", "a.b", true),
            ("invoice.*", "invoice.paid", true),
            ("invoice.*", "invoice.", true),
            ("invoice.*", "invoices.paid", false),
            ("*.paid", "invoice.paid", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("push", "push", true),
            ("push", "pushed", false),
        ] {
            assert_eq!(glob_matches(glob, text), matches, "{glob} ~ {text}");
        }
    }
}
