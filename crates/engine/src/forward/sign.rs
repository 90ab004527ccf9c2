//! The Standard Webhooks signature a destination verifies: `v1,` and the
//! base64 HMAC-SHA256 of `"{id}.{timestamp}.{body}"` under each key,
//! space-separated during a rotation — what the spec's libraries (Node,
//! Python, Go, …) check with the destination's `whsec_` secret.

use crate::config::ConfigError;
use crate::signature::{base64_decode, base64_encode, Secrets, Tag};

/// The shortest signing key accepted, decoded: the Standard Webhooks
/// spec's lower bound.
pub const KEY_MIN_BYTES: usize = 24;

/// A variable's keys: each `whsec_` and base64 of at least
/// [`KEY_MIN_BYTES`]; several, separated by commas or newlines, during a
/// rotation. The error names the variable, never the value.
pub fn signing_keys(var: &str, value: &str) -> Result<Vec<Vec<u8>>, ConfigError> {
    let secrets = Secrets::parse(value).map_err(|why| ConfigError(format!("{var}: {why}")))?;
    secrets
        .iter()
        .map(|secret| {
            let text = std::str::from_utf8(secret).unwrap_or_default();
            let key = text.strip_prefix("whsec_").and_then(base64_decode);
            key.filter(|key| key.len() >= KEY_MIN_BYTES).ok_or_else(|| {
                ConfigError(format!(
                    "{var}: each key must be whsec_ and the base64 of {KEY_MIN_BYTES} or more random bytes"
                ))
            })
        })
        .collect()
}

/// The `webhook-signature` header's value.
pub fn signature(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    let parts: [&[u8]; 5] = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
    keys.iter()
        .map(|key| format!("v1,{}", base64_encode(&Tag::sha256(key, &parts).bytes())))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_standard_webhooks_reference_vector() {
        // The spec libraries' `sign` test vector.
        let keys = signing_keys("K", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&keys, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn each_key_of_a_rotation_signs() {
        let old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let new = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX";
        let keys = signing_keys("K", &format!("{new},{old}")).unwrap();
        let both = signature(&keys, "msg_1", 1, b"{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1], signature(&keys[1..], "msg_1", 1, b"{}"));
        assert_ne!(parts[0], parts[1]);
    }

    #[test]
    fn keys_are_whsec_base64_of_24_bytes_or_more() {
        let key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        assert_eq!(signing_keys("K", key).unwrap()[0].len(), 24);
        let two = signing_keys("K", &format!("{key},{key}")).unwrap();
        assert_eq!(two.len(), 2);
        for weak in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_c2hvcnRzZWNyZXQ=",
            "whsec_!!!!!!!!",
            "",
        ] {
            let error = signing_keys("BACKEND_SIGNING_SECRET", weak).unwrap_err().0;
            assert!(error.starts_with("BACKEND_SIGNING_SECRET: "), "{error}");
            assert!(weak.is_empty() || !error.contains(weak), "{error}");
        }
    }
}
