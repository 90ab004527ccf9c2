//! Configuration: how each `wrangler.toml` var and secret is read, with a
//! named error when something is wrong — a misconfigured worker answers 500
//! with a log line saying which variable to fix, never panics. Read once
//! per isolate, by `settings`, which passes the parsed values down.

use std::str::FromStr;

use worker::Env;

use crate::names::named_enum;

mod table;
mod values;

pub use self::table::{is_variable_name, table, without_values, Entries};

#[cfg(any(feature = "admin", feature = "dashboard"))]
use self::values::check_admin_token;
use self::values::{doubling, jitter, random_unit};
pub use self::values::{duration_ms, is_http_url, DAY_MS};

/// The Durable Object namespace of the event inboxes.
pub const INBOX_BINDING: &str = "EVENT_INBOX";
/// The queue carrying outbox keys to the consumer.
pub const OUTBOX_BINDING: &str = "OUTBOX";
/// Where rows that exhausted their attempts are sent, for operators.
pub const OUTBOX_DLQ_BINDING: &str = "OUTBOX_DLQ";
/// The queue carrying forward delivery ids to their consumer.
pub const FORWARD_BINDING: &str = "FORWARD";

/// The queues the worker consumes, told apart by the end of their names
/// in `wrangler.toml` (`webhook-outbox`, a copy's `<name>-outbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumed {
    /// `…-outbox`: outbox keys.
    Outbox,
    /// `…-forward`: forward delivery ids.
    Forward,
}

impl Consumed {
    /// The queue called `name`, or `None` for a name that is neither.
    pub fn of(name: &str) -> Option<Consumed> {
        if name.ends_with("-outbox") {
            Some(Consumed::Outbox)
        } else if name.ends_with("-forward") {
            Some(Consumed::Forward)
        } else {
            None
        }
    }
}
#[cfg(any(feature = "admin", feature = "dashboard"))]
/// The one object counting admin credential failures and holding revoked
/// sessions (`admin_guard`).
pub const GUARD_BINDING: &str = "ADMIN_GUARD";

/// The longest delay before an effect's retry: an hour.
pub const EFFECT_MAX_RETRY_DELAY_MS: i64 = 60 * 60 * 1000;

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// The shortest admin token accepted, in bytes: enough that guessing it is
/// hopeless even before the guard's throttle.
pub const ADMIN_TOKEN_MIN_BYTES: usize = 32;

/// A variable is missing or unreadable. The message names it; it never
/// contains any variable's value (a secret pasted into the wrong variable
/// must not end up in a log line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub(crate) String);

impl ConfigError {
    /// A misconfiguration, in words that name the setting, never its value.
    pub fn new(why: impl Into<String>) -> Self {
        ConfigError(why.into())
    }
}

/// Settings by name, each with its own error: one bad entry spoils only
/// itself.
pub type Named<T> = Vec<(String, Result<T, ConfigError>)>;

/// A misconfiguration met off the delivery path (the inbox, the consumer,
/// the admin pages) fails the call with its message, through `?`.
impl From<ConfigError> for worker::Error {
    fn from(error: ConfigError) -> Self {
        worker::Error::RustError(error.0)
    }
}

/// What the receiving path needs.
pub struct Limits {
    /// Largest body accepted (`MAX_BODY_BYTES`, default 1 MiB).
    pub max_body_bytes: usize,
    /// Allowed clock distance of a signed timestamp (`SIGNATURE_TOLERANCE_SECS`, default 300).
    pub tolerance_secs: u64,
    /// Whether the `x-test-fault` header is honoured (`TEST_FAULTS = "enabled"`).
    /// Only the end-to-end tests set it; in any deployment it is off.
    pub test_faults: bool,
}

impl Limits {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Limits {
            max_body_bytes: number(env, "MAX_BODY_BYTES", 1024 * 1024)?,
            tolerance_secs: number(env, "SIGNATURE_TOLERANCE_SECS", 300)?,
            test_faults: test_faults(env),
        })
    }
}

/// What the inbox needs to retry and to forget.
pub struct InboxSettings {
    /// How long an inbox remembers its event (`RETENTION`, default `30d`):
    /// longer than any provider retries (3 days is common).
    pub retention_ms: i64,
    /// The first retry delay of an unfinished effect (`EFFECT_RETRY_BASE_MS`,
    /// default 10 s); it doubles per failure, up to an hour.
    pub retry_base_ms: i64,
    /// Failed effect attempts before the event is marked `failed`
    /// (`EFFECT_MAX_ATTEMPTS`, default 10).
    pub max_attempts: i64,
    /// Where effects commit (`STORE`).
    pub store: Store,
}

named_enum! {
    /// Where an event's effect and its ledger row commit (`STORE`, default
    /// `d1`). `postgres` needs the cargo feature of that name and a
    /// `[[hyperdrive]]` binding (docs/postgres.md).
    pub enum Store {
        D1 = "d1",
        Postgres = "postgres",
    }
}

impl Store {
    fn from_env(env: &Env) -> Result<Store, ConfigError> {
        let Some(name) = text(env, "STORE") else {
            return Ok(Store::D1);
        };
        match Store::from_name(&name) {
            Some(Store::Postgres) if !cfg!(feature = "postgres") => Err(ConfigError(
                "STORE = \"postgres\" needs the cargo feature `postgres` (docs/postgres.md)".into(),
            )),
            #[cfg(feature = "postgres")]
            Some(Store::Postgres)
                if env.hyperdrive(crate::postgres::HYPERDRIVE_BINDING).is_err() =>
            {
                Err(ConfigError(format!(
                    "STORE = \"postgres\" needs the [[hyperdrive]] binding {} in wrangler.toml \
                     (docs/postgres.md)",
                    crate::postgres::HYPERDRIVE_BINDING
                )))
            }
            Some(store) => Ok(store),
            None => Err(ConfigError("STORE must be d1 or postgres".into())),
        }
    }
}

impl InboxSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let retention = text(env, "RETENTION");
        let retention_ms = match retention.as_deref() {
            None => 30 * DAY_MS,
            Some(value) => duration_ms(value).ok_or_else(|| {
                ConfigError("RETENTION must be a duration like 30d, 12h or 90s".into())
            })?,
        };
        Ok(InboxSettings {
            retention_ms,
            retry_base_ms: number(env, "EFFECT_RETRY_BASE_MS", 10_000)?,
            max_attempts: number(env, "EFFECT_MAX_ATTEMPTS", 10)?,
            store: Store::from_env(env)?,
        })
    }

    /// Delay before the retry that follows `failures` failed attempts,
    /// jittered (see `jitter`).
    pub fn backoff_ms(&self, failures: i64) -> i64 {
        jitter(
            doubling(self.retry_base_ms, failures, EFFECT_MAX_RETRY_DELAY_MS),
            random_unit(),
        )
    }
}

/// When operators are alerted (see `outbox::notify_operator`).
#[derive(Debug, Clone)]
pub struct AlertSettings {
    /// At most one alert of each kind per source in each interval of this
    /// length (`ALERT_INTERVAL`, a duration, default 15m).
    pub interval_ms: i64,
    /// Refusals for one source in one minute that make an alert
    /// (`ALERT_REFUSALS_PER_MINUTE`, default 60).
    pub refusals_per_minute: i64,
}

impl AlertSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let interval_ms = match text(env, "ALERT_INTERVAL") {
            None => 15 * 60 * 1000,
            Some(value) => duration_ms(&value).filter(|ms| *ms > 0).ok_or_else(|| {
                ConfigError("ALERT_INTERVAL must be a duration like 15m, 1h or 90s".into())
            })?,
        };
        let refusals_per_minute = number(env, "ALERT_REFUSALS_PER_MINUTE", 60)?;
        if refusals_per_minute < 1 {
            return Err(ConfigError(
                "ALERT_REFUSALS_PER_MINUTE must be 1 or more".into(),
            ));
        }
        // The one alert channel: a typo must not be found by an alert that
        // never arrives. (Its value, a secret, is never quoted.)
        if let Some(url) = optional(env, "ALERT_URL") {
            if !is_http_url(url.trim()) {
                return Err(ConfigError("ALERT_URL must be an http(s) URL".into()));
            }
        }
        Ok(AlertSettings {
            interval_ms,
            refusals_per_minute,
        })
    }
}

/// What the outbox consumer and relay need.
pub struct OutboxSettings {
    /// Attempts before a row is `dead` (`OUTBOX_MAX_ATTEMPTS`, default 5).
    pub max_attempts: i64,
    /// First retry delay (`OUTBOX_RETRY_BASE_SECS`, default 30); doubles per
    /// failure, up to an hour.
    pub retry_base_secs: u32,
    /// How long a claim holds a row before another run may take it over
    /// (`OUTBOX_LEASE_MS`, default 60 s): longer than any one call.
    pub lease_ms: i64,
    /// How long a due row may wait for its message before the cron relay
    /// re-sends it (`OUTBOX_RELAY_GRACE_MS`, default 60 s).
    pub relay_grace_ms: i64,
}

impl OutboxSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(OutboxSettings {
            max_attempts: number(env, "OUTBOX_MAX_ATTEMPTS", 5)?,
            retry_base_secs: number(env, "OUTBOX_RETRY_BASE_SECS", 30)?,
            lease_ms: number(env, "OUTBOX_LEASE_MS", 60_000)?,
            relay_grace_ms: number(env, "OUTBOX_RELAY_GRACE_MS", 60_000)?,
        })
    }

    /// Delay before the retry that follows `failures` failed attempts,
    /// jittered (see `jitter`).
    pub fn backoff_secs(&self, failures: i64) -> u32 {
        let secs = doubling(i64::from(self.retry_base_secs), failures, 60 * 60);
        u32::try_from(jitter(secs, random_unit()).max(1)).unwrap_or(u32::MAX)
    }

    /// How long an outgoing call may take: half the lease, so a call is
    /// aborted well before another consumer may take the row over.
    pub fn call_timeout_ms(&self) -> u32 {
        u32::try_from(self.lease_ms / 2).unwrap_or(u32::MAX).max(1)
    }
}

/// What forwarding's consumer and relay need besides the destinations.
pub struct ForwardSettings {
    /// First retry delay and how long a claim holds a row: the outbox's
    /// (`OUTBOX_RETRY_BASE_SECS`, `OUTBOX_LEASE_MS`, `OUTBOX_RELAY_GRACE_MS`).
    pub outbox: OutboxSettings,
    /// Consecutive failed attempts that open a destination's breaker
    /// (`FORWARD_BREAKER_FAILURES`, default 5).
    pub breaker_failures: i64,
    /// While open, one probe per this many seconds (`FORWARD_PROBE_SECS`,
    /// default 30).
    pub probe_secs: u32,
}

impl ForwardSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let settings = ForwardSettings {
            outbox: OutboxSettings::from_env(env)?,
            breaker_failures: number(env, "FORWARD_BREAKER_FAILURES", 5)?,
            probe_secs: number(env, "FORWARD_PROBE_SECS", 30)?,
        };
        if settings.breaker_failures < 1 || settings.probe_secs < 1 {
            return Err(ConfigError(
                "FORWARD_BREAKER_FAILURES and FORWARD_PROBE_SECS must be 1 or more".into(),
            ));
        }
        Ok(settings)
    }
}

named_enum! {
    /// When a first delivery is answered: `REPLY_AFTER`, or a source's own
    /// `reply_after` in `[vars.SOURCES]`.
    #[derive(Default)]
    pub enum ReplyAfter {
        /// Once the effect is applied (or its failure recorded for a retry):
        /// a 200 `processed` means "applied".
        #[default]
        Effect = "effect",
        /// Once the event is claimed and its alarm armed: a 200 `accepted`
        /// means "recorded"; the effect follows the reply, in the same object.
        Record = "record",
    }
}

impl ReplyAfter {
    /// The source's own setting (`own`, from `SOURCES.{source}`), else
    /// `REPLY_AFTER`, else `effect`. Any other value, in either, is an error
    /// naming it.
    pub fn from_env(env: &Env, source: &str, own: Option<&str>) -> Result<Self, ConfigError> {
        let parse = |name: &str, value: &str| {
            ReplyAfter::from_name(value)
                .ok_or_else(|| ConfigError(format!("{name} must be effect or record")))
        };
        let global = match text(env, "REPLY_AFTER") {
            Some(value) => parse("REPLY_AFTER", &value)?,
            None => ReplyAfter::Effect,
        };
        match own {
            Some(value) => parse(&format!("SOURCES.{source}.reply_after"), value),
            None => Ok(global),
        }
    }
}

/// Whether the end-to-end tests' fault switches are honoured
/// (`TEST_FAULTS = "enabled"`, set by the tests only; off in any deployment).
pub fn test_faults(env: &Env) -> bool {
    text_is(env, "TEST_FAULTS", "enabled")
}

/// Whether the variable `name` is set to exactly `value`.
pub fn text_is(env: &Env, name: &str, value: &str) -> bool {
    text(env, name).as_deref() == Some(value)
}

#[cfg(feature = "dashboard")]
/// The longest dashboard session: a signed-out session is remembered this
/// long, so raising `ADMIN_SESSION_TTL` later revives none.
pub const ADMIN_SESSION_TTL_MAX_MS: i64 = 30 * DAY_MS;

#[cfg(feature = "dashboard")]
/// How long a dashboard session lasts (`ADMIN_SESSION_TTL`, a duration like
/// `12h`, the default; at most 30 days).
pub fn admin_session_ttl_ms(env: &Env) -> Result<i64, ConfigError> {
    match text(env, "ADMIN_SESSION_TTL") {
        None => Ok(12 * 60 * 60 * 1000),
        Some(value) => duration_ms(&value)
            .filter(|ms| (1..=ADMIN_SESSION_TTL_MAX_MS).contains(ms))
            .ok_or_else(|| {
                ConfigError(
                    "ADMIN_SESSION_TTL must be a duration like 12h, 30m or 90s, at most 30d".into(),
                )
            }),
    }
}

/// How often (ms) an isolate adds its delivery counters to D1
/// (`STATS_FLUSH_MS`, default 10 s; see `stats`).
pub fn stats_flush_ms(env: &Env) -> u64 {
    number(env, "STATS_FLUSH_MS", 10_000).unwrap_or(10_000)
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// `ADMIN_TOKEN`: `None` when unset or blank (no admin surface at all); an
/// error naming the rule when it is short or holds whitespace — a token
/// that could be guessed, or one mangled by a paste, never a weak lock.
pub fn admin_token(env: &Env) -> Result<Option<String>, ConfigError> {
    optional(env, "ADMIN_TOKEN")
        .map(|token| check_admin_token(&token).map(|()| token))
        .transpose()
}

/// An optional variable or secret (an outbox target), `None` when unset or blank.
pub fn optional(env: &Env, name: &str) -> Option<String> {
    text(env, name).filter(|v| !v.trim().is_empty())
}

/// A provider's secret(s) as set, from a secret binding or (in local
/// `.dev.vars`) a var; unset is an error naming the variable.
pub fn secret(env: &Env, name: &str) -> Result<String, ConfigError> {
    text(env, name).ok_or_else(|| {
        ConfigError(format!(
            "{name} is not set: add it with `wrangler secret put {name}` (or to .dev.vars locally)"
        ))
    })
}

fn text(env: &Env, name: &str) -> Option<String> {
    env.secret(name)
        .map(|s| s.to_string())
        .or_else(|_| env.var(name).map(|v| v.to_string()))
        .ok()
}

fn number<T: FromStr>(env: &Env, name: &str, default: T) -> Result<T, ConfigError> {
    match text(env, name) {
        None => Ok(default),
        Some(value) => value
            .trim()
            .parse()
            .map_err(|_| ConfigError(format!("{name} must be a whole number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_told_apart_by_the_end_of_their_names() {
        assert_eq!(Consumed::of("webhook-outbox"), Some(Consumed::Outbox));
        assert_eq!(Consumed::of("acme-forward-outbox"), Some(Consumed::Outbox));
        assert_eq!(Consumed::of("webhook-forward"), Some(Consumed::Forward));
        assert_eq!(Consumed::of("acme-outbox-forward"), Some(Consumed::Forward));
        assert_eq!(Consumed::of("acme-outbox-dlq"), None);
        assert_eq!(Consumed::of("acme-forward-staging"), None);
    }

    #[test]
    fn outbox_backoff_doubles_up_to_an_hour_with_jitter() {
        let s = OutboxSettings {
            max_attempts: 5,
            retry_base_secs: 30,
            lease_ms: 0,
            relay_grace_ms: 0,
        };
        for (failures, full) in [(1, 30), (2, 60), (3, 120), (4, 240), (30, 3600)] {
            let delay = s.backoff_secs(failures);
            assert!((full / 2..=full).contains(&delay), "{failures}: {delay}");
        }
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_an_hour() {
        let s = InboxSettings {
            retention_ms: 0,
            retry_base_ms: 1_000,
            max_attempts: 10,
            store: Store::D1,
        };
        let full = |n| doubling(s.retry_base_ms, n, 60 * 60 * 1000);
        let delays: Vec<i64> = (1..=4).map(full).collect();
        assert_eq!(delays, vec![1_000, 2_000, 4_000, 8_000]);
        assert_eq!(full(0), 1_000);
        assert_eq!(full(40), 60 * 60 * 1000);
        for n in [0, 1, 4, 40] {
            let delay = s.backoff_ms(n);
            assert!((full(n) / 2..=full(n)).contains(&delay), "{n}: {delay}");
        }
    }
}
