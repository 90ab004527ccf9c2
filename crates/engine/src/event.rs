//! The one type that crosses from verification into storage: an event whose
//! signature checked out, named by the provider's stable id. Nothing
//! downstream of verification looks at headers or signatures again.

use serde::{Deserialize, Serialize};

/// A verified event, provider-independent: what an effect's planner reads.
/// Made by the engine (and by [`VerifiedEvent::example`] in an effect's
/// tests); its fields may be read, and set in a test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VerifiedEvent {
    /// The `{source}` it arrived on: the dedupe scope.
    pub source: String,
    /// The source's provider (one provider may serve several sources), which
    /// effects are planned by.
    pub provider: String,
    /// The provider's stable event id.
    pub id: String,
    /// The event type, as the provider names it.
    pub kind: String,
    /// The raw body, exactly as signed.
    pub body: String,
    /// Where the signature does not cover the id: the SHA-256 (hex) of what
    /// it does cover, which the ledger fences on, so that one signed body
    /// makes one effect per source whatever id it arrives under (see
    /// `effects` and `Provider::replay_fence`).
    pub(crate) fence: Option<String>,
    /// When this delivery arrived (for the held event: the first one), in
    /// milliseconds since the Unix epoch.
    pub received_at: i64,
    /// Where it is forwarded, fixed when it was received: a
    /// `forward::Forward` as JSON (the destinations, and the request headers
    /// they are sent). `None` for an event forwarded nowhere.
    pub(crate) forward: Option<String>,
}

impl VerifiedEvent {
    /// An event as an effect's test builds one: `provider` also names its
    /// source, its id is `evt_1`, and it arrived at 1,000 ms.
    pub fn example(provider: &str, kind: &str, body: &str) -> VerifiedEvent {
        VerifiedEvent {
            source: provider.into(),
            provider: provider.into(),
            id: "evt_1".into(),
            kind: kind.into(),
            body: body.into(),
            fence: Some(sha256_hex(body.as_bytes())),
            received_at: 1_000,
            forward: None,
        }
    }

    /// `"{source}:{id}"`: the name of the event's inbox and the key in replies.
    /// Scoped by source because ids are only unique within one provider (and
    /// one provider's ids may repeat across its hooks).
    pub fn key(&self) -> String {
        dedupe_key(&self.source, &self.id)
    }
}

/// `"{source}:{id}"`. One key per pair because a source's name never holds
/// `:` ([`is_source_name`]): the first `:` ends the source, whatever the id.
pub(crate) fn dedupe_key(source: &str, id: &str) -> String {
    format!("{source}:{id}")
}

/// Whether `name` can name a source: not empty, and without `:`, which
/// would let `("acme:a", "b")` reach the inbox of `("acme", "a:b")`.
/// Checked where a name enters: `[vars.SOURCES]` and the admin surface.
pub(crate) fn is_source_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(':')
}

/// SHA-256 of a payload, hex: how the ledger and the delivery log know a
/// payload without keeping it.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_per_source_and_id() {
        // Every inbox keeps the name it had: source, `:`, id.
        assert_eq!(dedupe_key("acme", "evt_1"), "acme:evt_1");
        assert_eq!(dedupe_key("acme", "a:b"), "acme:a:b");
        // The one other spelling of that key has no source to come from.
        assert!(is_source_name("acme"));
        assert!(!is_source_name("acme:a"));
        assert!(!is_source_name(""));
    }
}
