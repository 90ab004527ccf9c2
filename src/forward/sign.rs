//! The Standard Webhooks signature a destination verifies: `v1,` and the
//! base64 HMAC-SHA256 of `"{id}.{timestamp}.{body}"` under each key,
//! space-separated during a rotation — what the spec's libraries (Node,
//! Python, Go, …) check with the destination's `whsec_` secret.

use crate::signature::{base64_encode, Tag};

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
    use crate::forward::destinations::signing_keys;

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
}
