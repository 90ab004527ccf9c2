//! Standard Webhooks (<https://www.standardwebhooks.com>), under its own
//! header names and those of the services that send it under theirs.
//!
//! `webhook-signature` is a space-separated list of `v1,<base64>` (HMAC-SHA256
//! under the secret `whsec_<base64>`) and `v1a,<base64>` (ed25519 under the
//! public key `whpk_<base64>`), each over `"{webhook-id}.{webhook-timestamp}.{body}"`.
//! One valid entry is enough. The timestamp must be within the window; the
//! dedupe key is `webhook-id`, which the sender keeps across retries.

use ed25519_compact::{PublicKey, Signature};
use serde::Deserialize;

use super::{
    required_header, verdict, ConfigError, EventIdentity, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};
use crate::signature::{base64_decode, Tag};

#[derive(Clone, Copy)]
pub struct StandardWebhooks {
    name: &'static str,
    id_header: &'static str,
    timestamp_header: &'static str,
    signature_header: &'static str,
}

/// The shortest HMAC key a `whsec_` secret may decode to.
const MIN_KEY_BYTES: usize = 16;

/// A configured secret, decoded.
enum Key {
    /// `whsec_…`: the HMAC key (the prefix is optional, as in the reference libraries).
    Symmetric(Vec<u8>),
    /// `whpk_…`: an ed25519 public key.
    Public(PublicKey),
}

impl Key {
    fn parse(secret: &[u8]) -> Result<Key, String> {
        let text = std::str::from_utf8(secret).map_err(|_| "a secret is not text".to_string())?;
        if let Some(public) = text.strip_prefix("whpk_") {
            let bytes = base64_decode(public).ok_or("a whpk_ key is not base64")?;
            let key = PublicKey::from_slice(&bytes).map_err(|_| "a whpk_ key is not 32 bytes")?;
            return Ok(Key::Public(key));
        }
        let encoded = text.strip_prefix("whsec_").unwrap_or(text);
        let bytes = base64_decode(encoded).ok_or("a whsec_ secret is not base64")?;
        // The reference libraries generate 24 to 64 random bytes; fewer
        // than 16 is a truncated paste, and none at all a key anyone has.
        if bytes.len() < MIN_KEY_BYTES {
            return Err(format!(
                "a whsec_ secret decodes to fewer than {MIN_KEY_BYTES} bytes"
            ));
        }
        Ok(Key::Symmetric(bytes))
    }
}

/// Each `provider` name this module serves, with the headers it reads.
const SCHEMES: &[StandardWebhooks] = &[
    StandardWebhooks {
        name: "standard-webhooks",
        id_header: "webhook-id",
        timestamp_header: "webhook-timestamp",
        signature_header: "webhook-signature",
    },
    // Svix (Resend, Clerk, …) sends the same scheme under `svix-*` names.
    StandardWebhooks {
        name: "svix",
        id_header: "svix-id",
        timestamp_header: "svix-timestamp",
        signature_header: "svix-signature",
    },
];

/// The scheme `name` names; the registry passes only names it serves.
fn scheme(name: &str) -> StandardWebhooks {
    *SCHEMES
        .iter()
        .find(|s| s.name == name)
        .unwrap_or(&SCHEMES[0])
}

pub fn build(config: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(scheme(&config.provider)))
}

impl Provider for StandardWebhooks {
    fn name(&self) -> &'static str {
        self.name
    }

    /// The id header is part of the signed content: no fence beyond it.
    fn replay_fence(&self, _req: &RawRequest) -> Option<String> {
        None
    }

    fn check_secret(&self, secret: &[u8]) -> Result<(), String> {
        Key::parse(secret).map(|_| ())
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let id = required_header(req, self.id_header).ok_or(Rejection::MissingSignature)?;
        let timestamp_text =
            required_header(req, self.timestamp_header).ok_or(Rejection::MissingSignature)?;
        let header =
            required_header(req, self.signature_header).ok_or(Rejection::MissingSignature)?;
        let timestamp: u64 = timestamp_text
            .parse()
            .map_err(|_| Rejection::MalformedSignature)?;

        // (version, decoded signature); unknown versions are skipped.
        let candidates: Vec<(&str, Vec<u8>)> = header
            .split(' ')
            .filter_map(|entry| entry.split_once(','))
            .filter(|(version, _)| matches!(*version, "v1" | "v1a"))
            .filter_map(|(version, sig)| Some((version, base64_decode(sig)?)))
            .collect();
        if candidates.is_empty() {
            return Err(Rejection::MalformedSignature);
        }

        let keys = ctx
            .secrets
            .iter()
            .enumerate()
            .filter_map(|(position, s)| Some((position, Key::parse(s).ok()?)));
        let parts: [&[u8]; 5] = [
            id.as_bytes(),
            b".",
            timestamp_text.as_bytes(),
            b".",
            &req.body,
        ];
        let mut signed_content: Option<Vec<u8>> = None;
        let signed_by = keys.into_iter().find_map(|(position, key)| {
            let (matched, scheme) = match key {
                Key::Symmetric(secret) => {
                    let tag = Tag::sha256(&secret, &parts);
                    let matched = candidates
                        .iter()
                        .any(|(version, sig)| *version == "v1" && tag.matches(sig));
                    (matched, "v1: HMAC-SHA256")
                }
                Key::Public(public) => {
                    let content = signed_content.get_or_insert_with(|| parts.concat());
                    let matched = candidates.iter().any(|(version, sig)| {
                        *version == "v1a"
                            && Signature::from_slice(sig)
                                .is_ok_and(|sig| public.verify(&content[..], &sig).is_ok())
                    });
                    (matched, "v1a: Ed25519")
                }
            };
            matched.then_some((position, scheme))
        });
        let scheme = signed_by.map_or_else(String::new, |(_, scheme)| {
            format!("{} {scheme} of id.timestamp.body", self.signature_header)
        });
        verdict(
            &scheme,
            signed_by.map(|(position, _)| position),
            Some(timestamp),
            ctx,
        )
    }

    /// The type is the payload's `type`, the convention of the spec.
    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        #[derive(Deserialize)]
        struct Payload {
            #[serde(rename = "type")]
            kind: Option<String>,
        }
        let id = required_header(req, self.id_header).ok_or(Rejection::MissingEventId)?;
        let payload: Payload = req.json()?;
        Ok(Identity::Event(EventIdentity {
            id: id.to_string(),
            kind: payload.kind.unwrap_or_else(|| "event".into()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing;
    use crate::signature::{base64_encode, Secrets};

    // The Standard Webhooks reference vector (its libraries' `sign` tests,
    // e.g. the PHP library's `testSignFunctionWorks`).
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: u64 = 1_614_265_330;
    const BODY: &str = r#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    // ed25519, made with Python's `cryptography` (an implementation
    // independent of this crate) over `"{ID}.{TS}.{BODY}"`:
    // seed = bytes(range(32)); key = Ed25519PrivateKey.from_private_bytes(seed)
    const PUBLIC: &str = "whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=";
    const SIG_V1A: &str = "v1a,yoUrgEkc12aGqm0n4Sydmdz55xJfTz4AsAgieHFjmkR7LJtqVCZOQYzvvHjI5kAey+r4iaBGxTFRrl2iBQxtDQ==";

    fn request(provider: &StandardWebhooks, sig: Option<&str>, ts: &str, body: &str) -> RawRequest {
        let headers = [
            (provider.id_header, Some(ID)),
            (provider.timestamp_header, Some(ts)),
            (provider.signature_header, sig),
        ];
        testing::request(&headers, body)
    }

    fn verify_with(
        provider: &StandardWebhooks,
        secrets: &str,
        sig: &str,
        now: u64,
    ) -> Result<(), Rejection> {
        let secrets = Secrets::split(secrets);
        let ctx = testing::context(&secrets, now);
        provider
            .verify(&request(provider, Some(sig), &TS.to_string(), BODY), &ctx)
            .map(drop)
    }

    #[test]
    fn the_reference_vector_verifies_under_each_header_set() {
        for provider in SCHEMES {
            assert_eq!(verify_with(provider, SECRET, SIG, TS), Ok(()));
            // The whsec_ prefix is optional.
            assert_eq!(verify_with(provider, &SECRET[6..], SIG, TS), Ok(()));
        }
    }

    #[test]
    fn the_scheme_names_the_header_and_the_version_that_matched() {
        let verified = |provider: &StandardWebhooks, secrets: &str, sig: &str| {
            let secrets = Secrets::split(secrets);
            let ctx = testing::context(&secrets, TS);
            let request = request(provider, Some(sig), &TS.to_string(), BODY);
            provider.verify(&request, &ctx).unwrap()
        };
        let hmac = verified(&scheme("standard-webhooks"), SECRET, SIG);
        assert_eq!(
            hmac.scheme,
            "webhook-signature v1: HMAC-SHA256 of id.timestamp.body"
        );
        assert_eq!((hmac.secret, hmac.signed_at), (0, Some(TS)));
        let both = format!("{SECRET} {PUBLIC}");
        let ed25519 = verified(&scheme("standard-webhooks"), &both, SIG_V1A);
        assert_eq!(
            ed25519.scheme,
            "webhook-signature v1a: Ed25519 of id.timestamp.body"
        );
        assert_eq!(ed25519.secret, 1);
    }

    #[test]
    fn ed25519_v1a_verifies_with_the_public_key() {
        let provider = scheme("standard-webhooks");
        assert_eq!(verify_with(&provider, PUBLIC, SIG_V1A, TS), Ok(()));
        // A v1a signature is not accepted under an HMAC secret, nor v1 under a public key.
        assert_eq!(
            verify_with(&provider, SECRET, SIG_V1A, TS),
            Err(Rejection::BadSignature)
        );
        assert_eq!(
            verify_with(&provider, PUBLIC, SIG, TS),
            Err(Rejection::BadSignature)
        );
        let secrets = Secrets::split(PUBLIC);
        let ctx = testing::context(&secrets, TS);
        let tampered = request(&provider, Some(SIG_V1A), &TS.to_string(), r#"{"test": 1}"#);
        assert_eq!(
            provider.verify(&tampered, &ctx),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn several_signatures_and_rotated_secrets() {
        let provider = scheme("standard-webhooks");
        let other = format!("v1,{}", base64_encode(&[0u8; 32]));
        let list = format!("{other} v2,abc {SIG} {SIG_V1A}");
        assert_eq!(verify_with(&provider, SECRET, &list, TS), Ok(()));
        assert_eq!(
            verify_with(&provider, &format!("whsec_b2xk {SECRET}"), SIG, TS),
            Ok(())
        );
        assert_eq!(
            verify_with(&provider, &format!("{PUBLIC},{SECRET}"), &list, TS),
            Ok(())
        );
        assert_eq!(
            verify_with(&provider, "whsec_b2xk", SIG, TS),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn stale_and_future_timestamps_are_refused() {
        let provider = scheme("standard-webhooks");
        assert_eq!(verify_with(&provider, SECRET, SIG, TS + 300), Ok(()));
        for now in [TS + 301, TS - 301] {
            assert_eq!(
                verify_with(&provider, SECRET, SIG, now),
                Err(Rejection::TimestampOutsideWindow)
            );
        }
    }

    #[test]
    fn missing_garbled_and_wrong_version_headers() {
        let provider = scheme("standard-webhooks");
        let secrets = Secrets::split(SECRET);
        let ctx = testing::context(&secrets, TS);
        let ts = TS.to_string();
        assert_eq!(
            provider.verify(&request(&provider, None, &ts, BODY), &ctx),
            Err(Rejection::MissingSignature)
        );
        for garbled in [
            "v1",
            "g0hM9SsE+OTPJTGt",
            "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "v1,***",
        ] {
            let req = request(&provider, Some(garbled), &ts, BODY);
            assert_eq!(
                provider.verify(&req, &ctx),
                Err(Rejection::MalformedSignature),
                "{garbled}"
            );
        }
        let req = request(&provider, Some(SIG), "yesterday", BODY);
        assert_eq!(
            provider.verify(&req, &ctx),
            Err(Rejection::MalformedSignature)
        );
    }

    #[test]
    fn svix_headers_do_not_satisfy_a_standard_webhooks_source() {
        let (standard, svix) = (scheme("standard-webhooks"), scheme("svix"));
        let secrets = Secrets::split(SECRET);
        let ctx = testing::context(&secrets, TS);
        let req = request(&svix, Some(SIG), &TS.to_string(), BODY);
        assert_eq!(
            standard.verify(&req, &ctx),
            Err(Rejection::MissingSignature)
        );
        assert!(svix.verify(&req, &ctx).is_ok());
        assert_eq!(svix.name(), "svix");
    }

    #[test]
    fn secrets_are_checked_when_loaded() {
        let provider = scheme("standard-webhooks");
        assert!(provider.check_secret(SECRET.as_bytes()).is_ok());
        assert!(provider.check_secret(PUBLIC.as_bytes()).is_ok());
        assert!(provider.check_secret(b"whsec_not*base64").is_err());
        assert!(provider.check_secret(b"whpk_AAAA").is_err());
    }

    #[test]
    fn the_id_header_is_the_key_and_the_payload_type_the_type() {
        let provider = scheme("standard-webhooks");
        let req = request(
            &provider,
            Some(SIG),
            "1",
            r#"{"type":"user.created","data":{}}"#,
        );
        let event = provider.identify(&req).unwrap().expect_event();
        assert_eq!(
            event,
            EventIdentity {
                id: ID.into(),
                kind: "user.created".into()
            }
        );
        let untyped = request(&provider, Some(SIG), "1", BODY);
        assert_eq!(
            provider.identify(&untyped).unwrap().expect_event().kind,
            "event"
        );
        let not_json = request(&provider, Some(SIG), "1", "nope");
        assert!(matches!(
            provider.identify(&not_json),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
