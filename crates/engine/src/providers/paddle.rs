//! Paddle Billing: `Paddle-Signature: ts=<unix seconds>;h1=<hex>[;h1=…]`,
//! an HMAC-SHA256 of `"{ts}:{body}"` under the notification destination's
//! secret key. Several `h1` appear while a secret is rotated. The dedupe key
//! is the body's `event_id`, the type its `event_type`.

use super::{
    json_identity, required_header, verdict, ConfigError, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};

pub struct Paddle;

pub fn build(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(Paddle))
}

impl Provider for Paddle {
    fn name(&self) -> &'static str {
        "paddle"
    }

    /// The id is in the signed body: no fence beyond it.
    fn replay_fence(&self, _req: &RawRequest) -> Option<String> {
        None
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header = required_header(req, "paddle-signature").ok_or(Rejection::MissingSignature)?;
        let mut timestamp_text = None;
        let mut candidates = Vec::new();
        for item in header.split(';') {
            match item.trim().split_once('=') {
                Some(("ts", ts)) => timestamp_text = Some(ts),
                Some(("h1", sig)) => candidates.extend(hex::decode(sig).ok()),
                Some(_) => {}
                None => return Err(Rejection::MalformedSignature),
            }
        }
        let timestamp_text = timestamp_text.ok_or(Rejection::MalformedSignature)?;
        let timestamp: u64 = timestamp_text
            .parse()
            .map_err(|_| Rejection::MalformedSignature)?;
        if candidates.is_empty() {
            return Err(Rejection::MalformedSignature);
        }
        let signed: [&[u8]; 3] = [timestamp_text.as_bytes(), b":", &req.body];
        verdict(
            "Paddle-Signature h1: HMAC-SHA256 of ts:body",
            ctx.secrets.any_signed(&signed, &candidates),
            Some(timestamp),
            ctx,
        )
    }

    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        json_identity(req, "event_id", "event_type").map(Identity::Event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing;
    use crate::signature::Secrets;

    const BODY: &str = r#"{"event_id":"evt_01h8bxk9wyy4b3dz1t3sq0yp1d","event_type":"transaction.completed","data":{}}"#;
    // Computed independently with Python's hmac module over "1700000000:" + BODY.
    const H1: &str = "e43b212263051d55d67a3f545c55722cba025ae307fc378977c18948742dd5cf";
    const NOW: u64 = 1_700_000_000;

    fn verify_at(header: &str, secrets: &str, now: u64) -> Result<(), Rejection> {
        let secrets = Secrets::split(secrets);
        let ctx = testing::context(&secrets, now);
        let req = testing::request(&[("Paddle-Signature", Some(header))], BODY);
        Paddle.verify(&req, &ctx).map(drop)
    }

    #[test]
    fn verifies_with_any_h1_and_rotated_secrets() {
        let secret = "pdl_ntfset_test_secret";
        assert_eq!(verify_at(&format!("ts={NOW};h1={H1}"), secret, NOW), Ok(()));
        assert_eq!(
            verify_at(
                &format!("ts={NOW};h1={};h1={H1}", "00".repeat(32)),
                secret,
                NOW
            ),
            Ok(())
        );
        assert_eq!(
            verify_at(&format!("ts={NOW};h1={H1}"), &format!("old,{secret}"), NOW),
            Ok(())
        );
        assert_eq!(
            verify_at(&format!("ts={NOW};h1={H1}"), "other", NOW),
            Err(Rejection::BadSignature)
        );
        assert_eq!(
            verify_at(&format!("ts={};h1={H1}", NOW + 1), secret, NOW),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn window_and_garbled_headers() {
        let secret = "pdl_ntfset_test_secret";
        let header = format!("ts={NOW};h1={H1}");
        assert_eq!(
            verify_at(&header, secret, NOW + 301),
            Err(Rejection::TimestampOutsideWindow)
        );
        assert_eq!(
            verify_at(&header, secret, NOW - 301),
            Err(Rejection::TimestampOutsideWindow)
        );
        for garbled in [
            "nonsense",
            &format!("h1={H1}"),
            &format!("ts={NOW}"),
            &format!("ts=x;h1={H1}"),
            &format!("ts={NOW},h1={H1}"),
        ] {
            assert_eq!(
                verify_at(garbled, secret, NOW),
                Err(Rejection::MalformedSignature),
                "{garbled}"
            );
        }
    }

    #[test]
    fn keyed_by_event_id() {
        let req = RawRequest::new("https://example.com/", [], BODY.as_bytes().to_vec());
        let event = Paddle.identify(&req).unwrap().expect_event();
        assert_eq!(event.id, "evt_01h8bxk9wyy4b3dz1t3sq0yp1d");
        assert_eq!(event.kind, "transaction.completed");
        let no_id = RawRequest::new(
            "https://example.com/",
            [],
            br#"{"event_type":"x"}"#.to_vec(),
        );
        assert_eq!(Paddle.identify(&no_id), Err(Rejection::MissingEventId));
    }
}
