//! The building blocks every signature scheme shares: HMAC over the raw
//! bytes, constant-time comparison, a two-sided timestamp window, and secrets
//! that may be rotated.
//!
//! Nothing here parses a body: verification runs on the bytes exactly as they
//! arrived, before anything trusts them.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// An HMAC-SHA256 computation over a message given in parts, so that signed
/// contents such as `"{t}.{body}"` are never copied into one buffer.
pub struct Tag(HmacSha256);

impl Tag {
    /// The HMAC-SHA256 under `key` of `parts`, read one after another.
    pub fn sha256(key: &[u8], parts: &[&[u8]]) -> Self {
        // HMAC takes keys of any length; this cannot fail.
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
        for part in parts {
            mac.update(part);
        }
        Tag(mac)
    }

    /// Constant-time comparison with a signature the provider sent. A
    /// candidate of the wrong length is simply unequal.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        self.0.clone().verify_slice(candidate).is_ok()
    }

    /// The tag itself, for signing (tests, fixtures, the README's curl line).
    pub fn to_hex(&self) -> String {
        hex::encode(self.bytes())
    }

    /// The tag's 32 bytes (for providers that send it in base64).
    pub fn bytes(&self) -> Vec<u8> {
        self.0.clone().finalize().into_bytes().to_vec()
    }
}

/// One source's signing secrets. Several may be configured at once so that a
/// secret can be rotated without dropping deliveries: a signature made with
/// any of them is accepted.
#[derive(Clone)]
pub struct Secrets(Vec<Vec<u8>>);

/// The shortest secret accepted: anything shorter is a typo or a
/// placeholder, and would make a key that can be guessed.
pub(crate) const MIN_SECRET_BYTES: usize = 8;

impl Secrets {
    /// Splits a configured value into secrets on commas and newlines only,
    /// trimming each. A value that holds none, a fragment with whitespace
    /// inside (`my team hook secret` is a pasted phrase, not three secrets),
    /// or one shorter than 8 bytes is an error: a
    /// misconfiguration must fail loudly, never verify with a weak key. The
    /// error says what is wrong by position, never by value.
    pub fn parse(value: &str) -> Result<Self, String> {
        let mut secrets = Vec::new();
        for (position, fragment) in value
            .split([',', '\n'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .enumerate()
        {
            if fragment.contains(char::is_whitespace) {
                return Err(format!(
                    "secret {position} has whitespace inside; separate secrets with commas or newlines"
                ));
            }
            if fragment.len() < MIN_SECRET_BYTES {
                return Err(format!(
                    "secret {position} is shorter than {MIN_SECRET_BYTES} bytes"
                ));
            }
            secrets.push(fragment.as_bytes().to_vec());
        }
        if secrets.is_empty() {
            return Err("holds no secret".into());
        }
        Ok(Secrets(secrets))
    }

    /// Secrets given whole, for tests of secrets the variable syntax would split.
    #[cfg(test)]
    pub(crate) fn from_raw(secrets: &[&[u8]]) -> Self {
        Secrets(secrets.iter().map(|s| s.to_vec()).collect())
    }

    /// Secrets split on commas and spaces without the strength rules, for
    /// tests against providers' published examples (short demo secrets).
    #[cfg(test)]
    pub(crate) fn split(value: &str) -> Self {
        Secrets(
            value
                .split([',', ' ', '\n'])
                .filter(|s| !s.is_empty())
                .map(|s| s.as_bytes().to_vec())
                .collect(),
        )
    }

    /// Each secret's bytes, in the order they were configured.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }

    /// The position of the first secret under which the HMAC-SHA256 of
    /// `parts` equals any of `candidates` (each compared in constant time):
    /// rotation on our side, several signatures on the sender's. `None` when
    /// none does.
    pub fn any_signed(&self, parts: &[&[u8]], candidates: &[Vec<u8>]) -> Option<usize> {
        self.iter().position(|secret| {
            let tag = Tag::sha256(secret, parts);
            candidates.iter().any(|candidate| tag.matches(candidate))
        })
    }
}

/// Secrets never reach a log line, even through `{:?}`.
impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} redacted)", self.0.len())
    }
}

/// Standard base64 (with padding), as several providers
/// send it. `None` when `text` is not base64.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// Standard base64, with padding: what a provider signing in base64 sends.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// True when `timestamp` lies within `tolerance` seconds of `now`, on either
/// side: a stale signature is a replay, and one from the future is a forgery
/// or a broken clock.
pub(crate) fn within_window(timestamp: u64, now: u64, tolerance: u64) -> bool {
    timestamp.abs_diff(now) <= tolerance
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_case_2() {
        let tag = Tag::sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            tag.to_hex(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn matches_only_the_exact_tag() {
        let tag = Tag::sha256(b"key", &[b"message"]);
        let good = hex::decode(tag.to_hex()).unwrap();
        assert!(tag.matches(&good));
        let mut flipped = good.clone();
        flipped[31] ^= 1;
        assert!(!tag.matches(&flipped));
        assert!(!tag.matches(&good[..31]));
        assert!(!tag.matches(&[]));
    }

    #[test]
    fn secrets_split_on_commas_and_newlines_only() {
        let secrets =
            Secrets::parse(" first_secret,second_secret\n third_secret\t,, \r\n").unwrap();
        let got: Vec<&[u8]> = secrets.iter().collect();
        assert_eq!(
            got,
            vec![&b"first_secret"[..], b"second_secret", b"third_secret"]
        );
        assert!(Secrets::parse(" , \n").is_err());
        assert!(Secrets::parse("").is_err());
    }

    #[test]
    fn a_weak_or_pasted_secret_is_an_error_that_does_not_echo_it() {
        let phrase = Secrets::parse("my team hook secret").unwrap_err();
        assert!(phrase.contains("whitespace"), "{phrase}");
        assert!(!phrase.contains("team"), "{phrase}");
        let short = Secrets::parse("long_enough_secret, abc1234").unwrap_err();
        assert_eq!(short, "secret 1 is shorter than 8 bytes");
        assert!(Secrets::parse("exactly8").is_ok());
    }

    #[test]
    fn any_signed_names_the_secret_that_matched() {
        let secrets = Secrets::parse("current_secret, previous_secret").unwrap();
        let by_previous = Tag::sha256(b"previous_secret", &[b"body"]).bytes();
        assert_eq!(secrets.any_signed(&[b"body"], &[by_previous]), Some(1));
        let forged = Tag::sha256(b"someone_else", &[b"body"]).bytes();
        assert_eq!(secrets.any_signed(&[b"body"], &[forged]), None);
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let secrets = Secrets::parse("whsec_topsecret").unwrap();
        let shown = format!("{secrets:?}");
        assert!(!shown.contains("topsecret"), "{shown}");
    }

    #[test]
    fn window_is_two_sided_and_inclusive() {
        assert!(within_window(1000, 1000, 300));
        assert!(within_window(700, 1000, 300));
        assert!(within_window(1300, 1000, 300));
        assert!(!within_window(699, 1000, 300));
        assert!(!within_window(1301, 1000, 300));
    }
}
