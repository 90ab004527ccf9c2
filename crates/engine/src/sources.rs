//! Sources: the `{source}` of `/webhooks/{source}`, each with a provider,
//! its secret(s) and options — so that two accounts, or two endpoints of one
//! provider, can each have their own.
//!
//! Declared in `wrangler.toml` as an object var:
//!
//! ```toml
//! [vars.SOURCES]
//! billing = { provider = "<provider>" }
//! billing-eu = { provider = "<provider>", secret = "BILLING_EU_SECRET" }
//! ```
//!
//! A source's secret is the secret (or var) named by `secret`, by default
//! `{NAME}_WEBHOOK_SECRET` (upper-cased, `-` as `_`).

use serde::Deserialize;
use worker::Env;

use crate::config::{self, without_values, ConfigError, Named};
use crate::event;

/// One source's settings. Fields past `tolerance_secs` describe a sender
/// configured without code (how it signs, where its id is), and only the
/// provider for such senders reads them.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SourceConfig {
    /// The provider that verifies its requests (`stripe`, or an app's own).
    pub provider: String,
    /// The variable holding the secret(s); default `{NAME}_WEBHOOK_SECRET`.
    pub secret: Option<String>,
    /// Overrides `SIGNATURE_TOLERANCE_SECS` for this source.
    pub tolerance_secs: Option<u64>,
    /// The destinations (`[vars.DESTINATIONS]`) its events are forwarded to.
    #[serde(default)]
    pub forward: Vec<String>,
    /// Overrides `REPLY_AFTER` for this source: `effect` or `record`.
    pub reply_after: Option<String>,
    /// Without code: the header carrying the signature.
    pub header: Option<String>,
    /// Without code: a prefix before the signature, e.g. `sha256=`.
    pub prefix: Option<String>,
    /// Without code: `hex` (default) or `base64`.
    pub encoding: Option<String>,
    /// Without code: `{body}` (default) or `{timestamp}.{body}`.
    pub signed: Option<String>,
    /// Without code: the header carrying the timestamp, for `{timestamp}.{body}`.
    pub timestamp_header: Option<String>,
    /// Without code: where the event id is: `header:<name>` or `json:<pointer>`.
    pub key: Option<String>,
    /// Without code: where the event type is (same syntax), optional.
    pub event_type: Option<String>,
}

impl SourceConfig {
    /// A source of `provider`, every other setting at its default (a
    /// provider's tests; the worker reads `[vars.SOURCES]`).
    pub fn new(provider: impl Into<String>) -> Self {
        SourceConfig {
            provider: provider.into(),
            ..SourceConfig::default()
        }
    }

    /// The name of the variable holding this source's secret(s).
    pub(crate) fn secret_var(&self, name: &str) -> String {
        self.secret.clone().unwrap_or_else(|| {
            format!(
                "{}_WEBHOOK_SECRET",
                name.to_ascii_uppercase().replace('-', "_")
            )
        })
    }
}

/// Every source, by name, each with its settings or why they are wrong.
pub(crate) fn all(env: &Env) -> Result<Named<SourceConfig>, ConfigError> {
    let sources = config::table(env, "SOURCES")?.ok_or_else(|| {
        ConfigError("SOURCES is not set: declare [vars.SOURCES] in wrangler.toml".into())
    })?;
    let parsed = |(name, settings): (String, Box<serde_json::value::RawValue>)| {
        let config = parse(&name, settings.get());
        (name, config)
    };
    Ok(sources.into_iter().map(parsed).collect())
}

fn parse(name: &str, json: &str) -> Result<SourceConfig, ConfigError> {
    if !event::is_source_name(name) {
        return Err(ConfigError(format!(
            "SOURCES.{name}: a source's name cannot contain ':' (it ends the source in an event's key)"
        )));
    }
    let config: SourceConfig = serde_json::from_str(json).map_err(|e| {
        ConfigError(format!(
            "SOURCES.{name}: {}",
            without_values(&e.to_string())
        ))
    })?;
    // Anything but a variable's name is likely the secret itself, pasted
    // where its variable's name goes (hex and `lin_wh_…` secrets included):
    // say so without repeating it.
    if config
        .secret
        .as_deref()
        .is_some_and(|var| !config::is_variable_name(var))
    {
        return Err(ConfigError(format!(
            "SOURCES.{name}.secret must name a variable (A-Z, 0-9, _), not hold the secret"
        )));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ReplyAfter;

    #[test]
    fn the_secret_variable_defaults_to_the_name() {
        let config = parse("billing-eu", r#"{"provider":"example"}"#).unwrap();
        assert_eq!(config.secret_var("billing-eu"), "BILLING_EU_WEBHOOK_SECRET");
        let named = parse("x", r#"{"provider":"example","secret":"MY_SECRET"}"#).unwrap();
        assert_eq!(named.secret_var("x"), "MY_SECRET");
    }

    #[test]
    fn a_name_that_could_blur_an_event_key_is_refused() {
        let error = parse("acme:a", r#"{"provider":"example"}"#).unwrap_err();
        assert!(error.0.starts_with("SOURCES.acme:a: "), "{}", error.0);
        assert!(parse("acme-eu_2", r#"{"provider":"example"}"#).is_ok());
    }

    #[test]
    fn a_source_may_answer_once_recorded() {
        let config = parse("acme", r#"{"provider":"example","reply_after":"record"}"#).unwrap();
        let mode = config
            .reply_after
            .as_deref()
            .and_then(ReplyAfter::from_name);
        assert_eq!(mode, Some(ReplyAfter::Record));
        assert_eq!(ReplyAfter::from_name("effect"), Some(ReplyAfter::Effect));
        assert_eq!(ReplyAfter::from_name("Record"), None, "exact names only");
        assert_eq!(ReplyAfter::default(), ReplyAfter::Effect);
    }

    #[test]
    fn unknown_settings_are_errors_that_name_the_source() {
        let error = parse("acme", r#"{"provider":"example","hedaer":"x"}"#).unwrap_err();
        assert!(
            error.0.starts_with("SOURCES.acme: unknown field `hedaer`"),
            "{}",
            error.0
        );
        assert!(
            parse("acme", r#"{"secret":"x"}"#).is_err(),
            "provider is required"
        );
    }

    #[test]
    fn a_secret_pasted_into_a_setting_is_never_repeated() {
        let pasted = parse(
            "acme",
            r#"{"provider":"example","secret":"whsec_abc/def+ghi="}"#,
        );
        let error = pasted.unwrap_err().0;
        assert!(error.contains("must name a variable"), "{error}");
        assert!(!error.contains("whsec_abc"), "{error}");
        let typed = parse(
            "acme",
            r#"{"provider":"example","tolerance_secs":"whsec_abc"}"#,
        );
        let error = typed.unwrap_err().0;
        assert!(error.starts_with("SOURCES.acme: invalid type"), "{error}");
        assert!(!error.contains("whsec_abc"), "{error}");
        assert!(parse("acme", r#"{"provider":"example","secret":"ACME_SECRET_2"}"#).is_ok());
        for pasted in ["0f3a9c1d2e", "lin_wh_abcdef", "acme_secret"] {
            let json = format!(r#"{{"provider":"example","secret":"{pasted}"}}"#);
            let error = parse("acme", &json).unwrap_err().0;
            assert!(!error.contains(pasted), "{error}");
        }
    }
}
