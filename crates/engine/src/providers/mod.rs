//! Webhook providers: one file per provider, each behind [`Provider`].
//!
//! A provider knows two things about its requests and nothing about storage:
//! how to check the signature over the raw bytes, and where the provider puts
//! the event id that stays the same on every retry. To add one: a file here
//! implementing [`Provider`] with a `build` function, its `mod` line and its
//! registry line below, and its cargo feature in Cargo.toml (the recipe "A
//! provider of your own" in docs/recipes.md). A file without a line, or a
//! line without a feature, fails a unit test that names it.

mod parts;
mod request;
pub mod testing;

pub use parts::{header_identity, hex_tag, json_identity, required_header, verdict};
pub use request::{EventIdentity, Identity, RawRequest, Rejection, Verified, VerifyContext};
pub(crate) use request::{MAX_EVENT_ID_BYTES, MAX_EVENT_TYPE_BYTES};

pub use crate::config::ConfigError;
pub use crate::sources::SourceConfig;

// One module per provider, built in by its cargo feature (declared here,
// not by the registry's macro, so that `cargo fmt` reaches the files).
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

/// The table [`build`] looks `provider` names up in, from one line per
/// provider. A module without its line leaves its `build` unused (a
/// warning); a line without its module does not compile.
macro_rules! registry {
    ($($feature:literal => $module:ident [$($name:literal),+],)+) => {
        #[cfg(not(any($(feature = $feature),+)))]
        compile_error!("build at least one provider: one of its cargo features");

        /// Each provider: its cargo feature, the `provider` names
        /// it serves, and its constructor when it is built in.
        const REGISTRY: &[Entry] = &[$(Entry {
            feature: $feature,
            names: &[$($name),+],
            #[cfg(feature = $feature)]
            build: Some($module::build),
            #[cfg(not(feature = $feature))]
            build: None,
        },)+];

        /// Each feature's module, for the test that finds files without a line.
        #[cfg(test)]
        const MODULES: &[(&str, &str)] = &[$(($feature, stringify!($module))),+];
    };
}

// cargo feature        module               the `provider` names it serves
registry! {
    "stripe"            => stripe            ["stripe"],
    "github"            => github            ["github"],
    "standard-webhooks" => standard_webhooks ["standard-webhooks", "svix"],
    "shopify"           => shopify           ["shopify"],
    "slack"             => slack             ["slack"],
    "linear"            => linear            ["linear"],
    "paddle"            => paddle            ["paddle"],
    "twilio"            => twilio            ["twilio"],
    "generic-hmac"      => generic_hmac      ["hmac"],
}

/// One line of the registry.
struct Entry {
    feature: &'static str,
    names: &'static [&'static str],
    build: Option<Build>,
}

/// A provider: how its requests are verified and what identifies an event.
/// One file per provider implements it; an app registers its own through
/// [`App::providers`](crate::App::providers).
pub trait Provider {
    /// The name effects are dispatched on: the registry's name for it.
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

/// A provider's constructor: a source's settings to its verifier.
pub type Build = fn(&SourceConfig) -> Result<Box<dyn Provider>, ConfigError>;

/// A source's `provider` setting to its verifier, among the engine's and
/// the app's own (`own`, [`App::providers`](crate::App::providers)): a named
/// error when the provider is compiled out or unknown.
pub(crate) fn build(
    config: &SourceConfig,
    own: &[(&str, Build)],
) -> Result<Box<dyn Provider>, ConfigError> {
    let name = config.provider.as_str();
    // The engine's names are its own: an app's provider cannot take one.
    let engines = REGISTRY.iter().any(|entry| entry.names.contains(&name));
    let own = own.iter().find(|(n, _)| *n == name);
    if let (Some((_, build)), false) = (own, engines) {
        // Effects are dispatched on the provider's own name: the one its
        // sources give it, and no other's.
        let provider = build(config)?;
        if provider.name() != name {
            return Err(ConfigError(format!(
                "provider {name} calls itself {}: its name() must be {name}",
                provider.name()
            )));
        }
        return Ok(provider);
    }
    let entry = REGISTRY.iter().find(|entry| entry.names.contains(&name));
    match entry {
        Some(Entry {
            build: Some(build), ..
        }) => build(config),
        Some(entry) => Err(ConfigError(format!(
            "provider {name} is not built in: build with the `{0}` cargo feature \
             (the app's, or webhook-engine/{0})",
            entry.feature
        ))),
        None => {
            let known: Vec<&str> = REGISTRY.iter().flat_map(|e| e.names).copied().collect();
            Err(ConfigError(format!(
                "unknown provider: use one of {}",
                known.join(", ")
            )))
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

    /// A provider's file, its registry line and its cargo feature come
    /// together: one without the others is named here.
    #[test]
    fn every_provider_file_has_a_registry_line_and_a_feature() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/providers");
        for file in std::fs::read_dir(dir).unwrap() {
            let file = file.unwrap().file_name().into_string().unwrap();
            let module = file.trim_end_matches(".rs");
            if ["mod", "parts", "request", "testing"].contains(&module) {
                continue;
            }
            assert!(
                MODULES.iter().any(|(_, m)| *m == module),
                "src/providers/{file} has no line in the registry (providers/mod.rs)"
            );
        }
        let cargo = include_str!("../../Cargo.toml");
        let default = cargo.lines().find(|l| l.starts_with("default = ")).unwrap();
        for (feature, module) in MODULES {
            assert!(
                cargo
                    .lines()
                    .any(|l| l.starts_with(&format!("{feature} = "))),
                "Cargo.toml has no `{feature}` feature for providers/{module}.rs"
            );
            assert!(
                default.contains(&format!("\"{feature}\"")),
                "Cargo.toml's default features lack `{feature}`"
            );
        }
    }

    #[test]
    fn an_unknown_provider_is_a_configuration_error_that_lists_them() {
        let error = build(&source("carrier-pigeon"), &[]).err().unwrap();
        assert!(
            error.0.starts_with("unknown provider: use one of "),
            "{error}"
        );
        for name in REGISTRY.iter().flat_map(|entry| entry.names) {
            assert!(error.0.contains(name), "{error}");
        }
    }

    /// An app's provider: answers to `name`, whatever its sources call it.
    struct Own(&'static str);

    impl Provider for Own {
        fn name(&self) -> &'static str {
            self.0
        }
        fn verify(&self, _: &RawRequest, _: &VerifyContext) -> Result<Verified, Rejection> {
            Err(Rejection::MissingSignature)
        }
        fn identify(&self, _: &RawRequest) -> Result<Identity, Rejection> {
            Err(Rejection::MissingEventId)
        }
    }

    #[test]
    fn an_apps_provider_is_built_by_its_name_and_must_answer_to_it() {
        fn acme(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
            Ok(Box::new(Own("acme-pay")))
        }
        fn liar(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
            Ok(Box::new(Own("acme-pay")))
        }
        let own: &[(&str, Build)] = &[("acme-pay", acme), ("other", liar)];
        assert_eq!(build(&source("acme-pay"), own).unwrap().name(), "acme-pay");
        let error = build(&source("other"), own).err().unwrap();
        assert_eq!(
            error.0,
            "provider other calls itself acme-pay: its name() must be other"
        );
        assert!(
            build(&source("acme-pay"), &[]).is_err(),
            "not the app's: unknown"
        );
    }

    #[test]
    fn an_apps_provider_cannot_take_an_engine_providers_name() {
        fn impostor(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
            Ok(Box::new(Own("impostor")))
        }
        for entry in REGISTRY {
            for name in entry.names {
                let own: &[(&str, Build)] = &[(name, impostor)];
                let built = build(&source(name), own).map(|p| p.name());
                assert_ne!(built, Ok("impostor"), "{name}");
            }
        }
    }

    /// `make unit` runs this with two providers built in, so that most are
    /// compiled out.
    #[test]
    fn a_provider_not_built_in_names_its_feature() {
        for entry in REGISTRY {
            for name in entry.names {
                let built = build(&source(name), &[]).err().map(|e| e.0);
                let not_built = format!(
                    "provider {name} is not built in: build with the `{0}` cargo feature \
                     (the app's, or webhook-engine/{0})",
                    entry.feature
                );
                match entry.build {
                    Some(_) => assert_ne!(built.as_ref(), Some(&not_built)),
                    None => assert_eq!(built, Some(not_built)),
                }
            }
        }
    }
}
