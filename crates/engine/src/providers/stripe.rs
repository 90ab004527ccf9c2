//! Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]`, an
//! HMAC-SHA256 of `"{t}.{raw body}"` under the endpoint's signing secret
//! (`whsec_…`, used as-is). Stripe sends several `v1` while you roll a secret.
//! The dedupe key is the event's `id`, which Stripe keeps across retries.

use serde::Deserialize;

use super::{
    required_header, verdict, ConfigError, EventIdentity, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};

pub struct Stripe;

pub fn build(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(Stripe))
}

/// The parts of the header that matter; unknown schemes (`v0`) are ignored,
/// as Stripe's own libraries do.
struct SignatureHeader<'a> {
    timestamp: &'a str,
    v1: Vec<Vec<u8>>,
}

fn parse_header(value: &str) -> Result<SignatureHeader<'_>, Rejection> {
    let mut timestamp = None;
    let mut v1 = Vec::new();
    for item in value.split(',') {
        let (key, val) = item
            .trim()
            .split_once('=')
            .ok_or(Rejection::MalformedSignature)?;
        match key {
            "t" if timestamp.is_none() => timestamp = Some(val),
            "t" => return Err(Rejection::MalformedSignature),
            // A garbled candidate cannot match; the others still may.
            "v1" => v1.extend(hex::decode(val).ok()),
            _ => {}
        }
    }
    match timestamp {
        Some(timestamp) if !v1.is_empty() => Ok(SignatureHeader { timestamp, v1 }),
        _ => Err(Rejection::MalformedSignature),
    }
}

impl Provider for Stripe {
    fn name(&self) -> &'static str {
        "stripe"
    }

    /// The id is in the signed body: no fence beyond it.
    fn replay_fence(&self, _req: &RawRequest) -> Option<String> {
        None
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header = required_header(req, "stripe-signature").ok_or(Rejection::MissingSignature)?;
        let header = parse_header(header)?;
        let timestamp: u64 = header
            .timestamp
            .parse()
            .map_err(|_| Rejection::MalformedSignature)?;

        let signed: [&[u8]; 3] = [header.timestamp.as_bytes(), b".", &req.body];
        verdict(
            "Stripe-Signature v1: HMAC-SHA256 of t.body",
            ctx.secrets.any_signed(&signed, &header.v1),
            Some(timestamp),
            ctx,
        )
    }

    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        #[derive(Deserialize)]
        struct Envelope {
            id: Option<String>,
            #[serde(rename = "type")]
            kind: Option<String>,
        }
        let envelope: Envelope = req.json()?;
        let id = envelope
            .id
            .filter(|id| !id.is_empty())
            .ok_or(Rejection::MissingEventId)?;
        let kind = envelope
            .kind
            .ok_or_else(|| Rejection::MalformedBody("no event type".into()))?;
        Ok(Identity::Event(EventIdentity { id, kind }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing;
    use crate::signature::Secrets;

    const BODY: &str =
        r#"{"id":"evt_test_1","type":"checkout.session.completed","created":1700000000}"#;
    const T: u64 = 1_700_000_000;
    // Computed independently with Python's hmac module:
    // hmac.new(secret, b"1700000000." + BODY, hashlib.sha256).hexdigest()
    const SIG_TEST: &str = "4e1abe21090636f4b09c52e6e0c90ae3838984a496f3b3abb1db7f941c30a836";
    const SIG_OLD: &str = "469c8cb0227fb569f75a27c448bcc21fb280cbaa5d0986b83ebc741a7123e82b";

    fn request(signature: Option<&str>, body: &str) -> RawRequest {
        testing::request(&[("Stripe-Signature", signature)], body)
    }

    fn verify_at(signature: &str, secrets: &str, now: u64) -> Result<(), Rejection> {
        let secrets = Secrets::split(secrets);
        let ctx = testing::context(&secrets, now);
        Stripe
            .verify(&request(Some(signature), BODY), &ctx)
            .map(drop)
    }

    fn verify(signature: &str, secrets: &str) -> Result<(), Rejection> {
        verify_at(signature, secrets, T + 10)
    }

    #[test]
    fn accepts_a_valid_signature() {
        assert_eq!(
            verify(&format!("t={T},v1={SIG_TEST}"), "whsec_test_secret"),
            Ok(())
        );
    }

    #[test]
    fn rejects_a_signature_from_another_secret() {
        let header = format!("t={T},v1={SIG_OLD}");
        assert_eq!(
            verify(&header, "whsec_test_secret"),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn rejects_a_tampered_body() {
        let secrets = Secrets::split("whsec_test_secret");
        let ctx = testing::context(&secrets, T);
        let tampered = BODY.replace("evt_test_1", "evt_test_2");
        let req = request(Some(&format!("t={T},v1={SIG_TEST}")), &tampered);
        assert_eq!(Stripe.verify(&req, &ctx), Err(Rejection::BadSignature));
    }

    #[test]
    fn rejects_a_signature_over_another_timestamp() {
        let header = format!("t={},v1={SIG_TEST}", T + 1);
        assert_eq!(
            verify(&header, "whsec_test_secret"),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn accepts_any_of_several_rotated_secrets() {
        let header = format!("t={T},v1={SIG_OLD}");
        assert_eq!(
            verify(&header, "whsec_test_secret, whsec_old_secret"),
            Ok(())
        );
        assert_eq!(
            verify(&header, "whsec_old_secret\nwhsec_test_secret"),
            Ok(())
        );
    }

    #[test]
    fn says_which_secret_and_what_time_it_verified_under() {
        let secrets = Secrets::split("whsec_test_secret, whsec_old_secret");
        let ctx = testing::context(&secrets, T + 10);
        let request = request(Some(&format!("t={T},v1={SIG_OLD}")), BODY);
        assert_eq!(
            Stripe.verify(&request, &ctx),
            Ok(Verified {
                scheme: "Stripe-Signature v1: HMAC-SHA256 of t.body".into(),
                secret: 1,
                signed_at: Some(T),
            })
        );
    }

    #[test]
    fn accepts_when_any_of_several_v1_matches() {
        let header = format!("t={T},v1={},v1={SIG_TEST},v0=abc", "00".repeat(32));
        assert_eq!(verify(&header, "whsec_test_secret"), Ok(()));
        let garbled_first = format!("t={T},v1=zz-not-hex,v1={SIG_TEST}");
        assert_eq!(verify(&garbled_first, "whsec_test_secret"), Ok(()));
    }

    #[test]
    fn rejects_stale_and_future_timestamps() {
        let header = format!("t={T},v1={SIG_TEST}");
        assert_eq!(verify_at(&header, "whsec_test_secret", T + 300), Ok(()));
        assert_eq!(verify_at(&header, "whsec_test_secret", T - 300), Ok(()));
        assert_eq!(
            verify_at(&header, "whsec_test_secret", T + 301),
            Err(Rejection::TimestampOutsideWindow)
        );
        assert_eq!(
            verify_at(&header, "whsec_test_secret", T - 301),
            Err(Rejection::TimestampOutsideWindow)
        );
    }

    #[test]
    fn rejects_missing_and_empty_headers() {
        let secrets = Secrets::split("whsec_test_secret");
        let ctx = testing::context(&secrets, T);
        assert_eq!(
            Stripe.verify(&request(None, BODY), &ctx),
            Err(Rejection::MissingSignature)
        );
        assert_eq!(
            Stripe.verify(&request(Some("  "), BODY), &ctx),
            Err(Rejection::MissingSignature)
        );
    }

    #[test]
    fn rejects_garbled_headers() {
        for header in [
            "garbage",
            &format!("v1={SIG_TEST}"),
            &format!("t={T}"),
            &format!("t={T},v1=not-hex"),
            &format!("t=soon,v1={SIG_TEST}"),
            &format!("t={T},t={T},v1={SIG_TEST}"),
            &format!("t={T};v1={SIG_TEST}"),
        ] {
            assert_eq!(
                verify(header, "whsec_test_secret"),
                Err(Rejection::MalformedSignature),
                "{header}"
            );
        }
    }

    #[test]
    fn identifies_the_event_by_its_id() {
        let id = Stripe
            .identify(&request(None, BODY))
            .unwrap()
            .expect_event();
        assert_eq!(id.id, "evt_test_1");
        assert_eq!(id.kind, "checkout.session.completed");
    }

    #[test]
    fn a_body_without_id_or_json_is_rejected() {
        let no_id = request(None, r#"{"type":"x"}"#);
        assert_eq!(Stripe.identify(&no_id), Err(Rejection::MissingEventId));
        let empty_id = request(None, r#"{"id":"","type":"x"}"#);
        assert_eq!(Stripe.identify(&empty_id), Err(Rejection::MissingEventId));
        let not_json = request(None, "id=evt_1");
        assert!(matches!(
            Stripe.identify(&not_json),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
