//! Every var and secret the engine reads, parsed once per isolate into
//! typed settings, then passed down. A deployment's vars and secrets never
//! change under a running isolate (a new value is a new version, in new
//! isolates), so nothing is parsed again per request.
//!
//! Each part keeps its own error, met where that part is used: a bad
//! `DESTINATIONS` refuses the deliveries that forward, a bad secret the
//! source it belongs to, and nothing else. A source's provider is built on
//! its first delivery, so an app's provider runs for its own source only.
//! Side effects' targets (a URL, an API key) are read where performed, by
//! the variable's name their row carries.

use std::cell::OnceCell;
use std::rc::Rc;

use worker::Env;

use crate::config::{
    self, AlertSettings, ConfigError, ForwardSettings, InboxSettings, Limits, Named,
    OutboxSettings, ReplyAfter,
};
use crate::forward::destinations::{self, Bounds, Destination};
use crate::log::{self, Level, Line};
use crate::providers::{self, Build, Provider};
use crate::signature::Secrets;
use crate::sources::{self, SourceConfig};

/// A source, ready to verify: its settings, its provider, its secrets.
pub struct Source {
    /// As written under `[vars.SOURCES]`.
    pub config: SourceConfig,
    /// Its provider, built once.
    pub provider: Box<dyn Provider>,
    /// Its secrets, each checked by its provider.
    pub secrets: Secrets,
    /// When its first deliveries are answered.
    pub reply_after: ReplyAfter,
}

/// A source as `[vars.SOURCES]` declares it: what was read, and its
/// provider, built on its first delivery (an app's provider's code runs
/// only for its own source's deliveries).
struct Declared {
    name: String,
    read: Result<Read, ConfigError>,
    built: OnceCell<Result<Source, ConfigError>>,
}

/// A source's settings and its secret's value, as read.
struct Read {
    config: SourceConfig,
    reply_after: ReplyAfter,
    secret_var: String,
    secret: String,
}

/// The engine's settings, parsed from one isolate's `env`.
pub struct Settings {
    /// Body cap, signature window, test faults.
    limits: Result<Limits, ConfigError>,
    /// `LOG_LEVEL`; `None` for a value that is neither `info` nor `warn`.
    pub log_level: Option<Level>,
    /// Retries and retention of the inboxes.
    inbox: Result<InboxSettings, ConfigError>,
    /// When operators are alerted.
    alerts: Result<AlertSettings, ConfigError>,
    /// The outbox consumer's and relay's.
    outbox: Result<OutboxSettings, ConfigError>,
    /// Forwarding's consumer's and relay's.
    forward: Result<ForwardSettings, ConfigError>,
    /// How often an isolate adds its counters to D1.
    pub stats_flush_ms: u64,
    /// Whether the end-to-end tests' fault switches are honoured.
    pub test_faults: bool,
    /// `SIDE_EFFECTS = "log"`: an unset side-effect target is skipped.
    pub side_effects_log: bool,
    /// `[vars.SOURCES]`, each source with its own error.
    sources: Result<Vec<Declared>, ConfigError>,
    /// `[vars.DESTINATIONS]`, checked.
    destinations: Result<Vec<Destination>, ConfigError>,
    /// Each declared destination's signing keys, or why it has none.
    keys: Named<Vec<Vec<u8>>>,
    /// `ADMIN_TOKEN`: `None` when unset (no admin surface).
    #[cfg(any(feature = "admin", feature = "dashboard"))]
    pub admin_token: Result<Option<String>, ConfigError>,
    /// How long a dashboard session lasts.
    #[cfg(feature = "dashboard")]
    pub session_ttl_ms: Result<i64, ConfigError>,
}

thread_local! {
    static SETTINGS: OnceCell<Rc<Settings>> = const { OnceCell::new() };
}

impl Settings {
    /// This isolate's settings: parsed from `env` on first use, then kept
    /// (logged once as `settings_parsed`, which `make profile` counts).
    /// Sets the isolate's log level too.
    pub fn of(env: &Env) -> Rc<Settings> {
        SETTINGS.with(|cell| {
            if let Some(settings) = cell.get() {
                return settings.clone();
            }
            let settings = cell.get_or_init(|| Rc::new(Settings::parse(env))).clone();
            log::set_level(settings.log_level.unwrap_or(Level::Info));
            let sources = settings.sources.as_ref().map_or(0, Vec::len);
            log::info(&Line::new("settings_parsed").counts(sources));
            settings
        })
    }

    fn parse(env: &Env) -> Settings {
        let inbox = InboxSettings::from_env(env);
        let outbox = OutboxSettings::from_env(env);
        let bounds = match (&inbox, &outbox) {
            (Ok(inbox), Ok(outbox)) => Ok(Bounds {
                retention_ms: inbox.retention_ms,
                max_timeout_ms: outbox.call_timeout_ms(),
            }),
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
        };
        let destinations = bounds.and_then(|bounds| destinations::all(env, &bounds));
        let keys = match &destinations {
            Ok(all) => all.iter().map(|d| (d.name.clone(), d.keys(env))).collect(),
            Err(_) => Vec::new(),
        };
        let sources = sources::all(env).map(|all| {
            let declared = |(name, config): (String, Result<SourceConfig, ConfigError>)| {
                let read = config.and_then(|config| read(env, &name, config));
                let built = OnceCell::new();
                Declared { name, read, built }
            };
            all.into_iter().map(declared).collect()
        });
        Settings {
            limits: Limits::from_env(env),
            log_level: log::level(env),
            alerts: AlertSettings::from_env(env),
            forward: ForwardSettings::from_env(env),
            inbox,
            outbox,
            stats_flush_ms: config::stats_flush_ms(env),
            test_faults: config::test_faults(env),
            side_effects_log: config::text_is(env, "SIDE_EFFECTS", "log"),
            sources,
            destinations,
            keys,
            #[cfg(any(feature = "admin", feature = "dashboard"))]
            admin_token: config::admin_token(env),
            #[cfg(feature = "dashboard")]
            session_ttl_ms: config::admin_session_ttl_ms(env),
        }
    }

    /// Body cap, signature window, test faults.
    pub fn limits(&self) -> Result<&Limits, ConfigError> {
        self.limits.as_ref().map_err(Clone::clone)
    }

    /// Retries and retention of the inboxes.
    pub fn inbox(&self) -> Result<&InboxSettings, ConfigError> {
        self.inbox.as_ref().map_err(Clone::clone)
    }

    /// When operators are alerted.
    pub fn alerts(&self) -> Result<&AlertSettings, ConfigError> {
        self.alerts.as_ref().map_err(Clone::clone)
    }

    /// The outbox consumer's and relay's.
    pub fn outbox(&self) -> Result<&OutboxSettings, ConfigError> {
        self.outbox.as_ref().map_err(Clone::clone)
    }

    /// Forwarding's consumer's and relay's.
    pub fn forward(&self) -> Result<&ForwardSettings, ConfigError> {
        self.forward.as_ref().map_err(Clone::clone)
    }

    /// The source called `name`: `Ok(None)` when there is none.
    /// Its provider (the engine's, or one of `own`, the app's) is built,
    /// and its secrets checked, on first use.
    pub fn source(
        &self,
        name: &str,
        own: &[(&str, Build)],
    ) -> Result<Option<&Source>, ConfigError> {
        let sources = self.sources.as_ref().map_err(Clone::clone)?;
        let Some(declared) = sources.iter().find(|source| source.name == name) else {
            return Ok(None);
        };
        let read = declared.read.as_ref().map_err(Clone::clone)?;
        let built = declared.built.get_or_init(|| build(read, own));
        built.as_ref().map(Some).map_err(Clone::clone)
    }

    /// Every declared destination, checked; none when `DESTINATIONS` is unset.
    pub fn destinations(&self) -> Result<&[Destination], ConfigError> {
        self.destinations.as_deref().map_err(Clone::clone)
    }

    /// The destinations deliveries may go to now: those whose keys are set
    /// and strong. Each other is logged as an error naming its variable;
    /// its deliveries wait, unspent, until it is fixed.
    pub fn usable(&self) -> Result<Vec<&Destination>, ConfigError> {
        let usable =
            self.destinations()?
                .iter()
                .filter(|destination| match self.keys(destination) {
                    Ok(_) => true,
                    Err(e) => {
                        let line = Line::new("forward_misconfigured").detail(&destination.name);
                        log::error(&line.error(e));
                        false
                    }
                });
        Ok(usable.collect())
    }

    /// The destinations `source` forwards an event of type `kind` to
    /// (`forward`: its setting), checked, their keys too, and forwarding's
    /// own settings: a delivery that cannot be forwarded is refused before
    /// anything is stored.
    pub fn routes(
        &self,
        source: &str,
        forward: &[String],
        kind: &str,
    ) -> Result<Vec<Destination>, ConfigError> {
        if forward.is_empty() {
            return Ok(Vec::new());
        }
        self.forward()?;
        let all = self.destinations()?;
        let mut routes = Vec::new();
        for name in forward {
            let destination = destinations::named(all, name).ok_or_else(|| {
                ConfigError(format!(
                    "SOURCES.{source}.forward names {name}, which DESTINATIONS does not declare"
                ))
            })?;
            self.keys(destination)?;
            if destination.wants(kind) {
                routes.push(destination.clone());
            }
        }
        Ok(routes)
    }

    /// `destination`'s signing keys: several during a rotation, each signing.
    pub fn keys(&self, destination: &Destination) -> Result<&[Vec<u8>], ConfigError> {
        match self.keys.iter().find(|(name, _)| *name == destination.name) {
            Some((_, keys)) => keys.as_deref().map_err(Clone::clone),
            None => Err(ConfigError(format!("{} is not declared", destination.name))),
        }
    }
}

/// A source's reply and its secret's value, read from `env`.
fn read(env: &Env, name: &str, config: SourceConfig) -> Result<Read, ConfigError> {
    let reply_after = ReplyAfter::from_env(env, name, config.reply_after.as_deref())?;
    let secret_var = config.secret_var(name);
    let secret = config::secret(env, &secret_var)?;
    Ok(Read {
        config,
        reply_after,
        secret_var,
        secret,
    })
}

/// A source's provider and secrets, checked: a weak or unusable secret is
/// an error naming its variable.
fn build(read: &Read, own: &[(&str, Build)]) -> Result<Source, ConfigError> {
    let provider = providers::build(&read.config, own)?;
    let secret_var = &read.secret_var;
    let secrets =
        Secrets::parse(&read.secret).map_err(|why| ConfigError(format!("{secret_var}: {why}")))?;
    for secret in secrets.iter() {
        provider
            .check_secret(secret)
            .map_err(|why| ConfigError(format!("{secret_var}: {why}")))?;
    }
    Ok(Source {
        config: read.config.clone(),
        provider,
        secrets,
        reply_after: read.reply_after,
    })
}
