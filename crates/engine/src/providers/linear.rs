//! Linear: `Linear-Signature` is the hex HMAC-SHA256 of the raw body under
//! the webhook's signing secret. The body's `webhookTimestamp` (milliseconds)
//! must be within the window — read only once the signature has checked out.
//! The dedupe key is `Linear-Delivery`; the type is `"{type}.{action}"`.

use serde::Deserialize;

use super::{
    hex_tag, required_header, verdict, ConfigError, EventIdentity, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};

pub struct Linear;

pub fn build(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(Linear))
}

#[derive(Deserialize)]
struct Payload {
    #[serde(rename = "type")]
    kind: Option<String>,
    action: Option<String>,
    #[serde(rename = "webhookTimestamp")]
    webhook_timestamp: Option<u64>,
}

fn payload(req: &RawRequest) -> Result<Payload, Rejection> {
    req.json()
}

impl Provider for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header = required_header(req, "linear-signature").ok_or(Rejection::MissingSignature)?;
        let candidate = hex_tag(header, "")?;
        const SCHEME: &str = "Linear-Signature: HMAC-SHA256 of the body (webhookTimestamp inside)";
        let verified = verdict(
            SCHEME,
            ctx.secrets.any_signed(&[&req.body], &[candidate]),
            None,
            ctx,
        )?;
        // Authentic from here on: the body may be read for its time.
        let sent_at = payload(req)?
            .webhook_timestamp
            .ok_or_else(|| Rejection::MalformedBody("no webhookTimestamp".into()))?;
        verdict(SCHEME, Some(verified.secret), Some(sent_at / 1000), ctx)
    }

    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        let id = required_header(req, "linear-delivery").ok_or(Rejection::MissingEventId)?;
        let payload = payload(req)?;
        let kind = match (payload.kind, payload.action) {
            (Some(kind), Some(action)) => format!("{kind}.{action}"),
            (Some(kind), None) => kind,
            _ => "event".into(),
        };
        Ok(Identity::Event(EventIdentity {
            id: id.to_string(),
            kind,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing;
    use crate::signature::Secrets;

    const BODY: &str = r#"{"action":"create","type":"Issue","data":{"id":"abc"},"webhookTimestamp":1700000000000}"#;
    // Computed independently with Python's hmac module.
    const SIG: &str = "fa4fe68552cdd0f0bb6437d696f68a64f2a8c02d746507ecc755626d97fbbad8";
    const NOW: u64 = 1_700_000_000;

    fn request(sig: Option<&str>, body: &str) -> RawRequest {
        let delivery = Some("234d1a4e-b617-4388-90fe-adc3633d6b72");
        testing::request(
            &[("Linear-Delivery", delivery), ("Linear-Signature", sig)],
            body,
        )
    }

    fn verify_at(sig: Option<&str>, secrets: &str, body: &str, now: u64) -> Result<(), Rejection> {
        let secrets = Secrets::split(secrets);
        let ctx = testing::context(&secrets, now);
        Linear.verify(&request(sig, body), &ctx).map(drop)
    }

    #[test]
    fn verifies_rotates_and_rejects() {
        assert_eq!(
            verify_at(Some(SIG), "lin_wh_test_secret", BODY, NOW),
            Ok(())
        );
        assert_eq!(
            verify_at(Some(SIG), "a,lin_wh_test_secret", BODY, NOW),
            Ok(())
        );
        assert_eq!(
            verify_at(Some(SIG), "other", BODY, NOW),
            Err(Rejection::BadSignature)
        );
        assert_eq!(
            verify_at(None, "s", BODY, NOW),
            Err(Rejection::MissingSignature)
        );
        assert_eq!(
            verify_at(Some("sha256=ab"), "s", BODY, NOW),
            Err(Rejection::MalformedSignature)
        );
    }

    #[test]
    fn the_body_timestamp_must_be_in_the_window() {
        assert_eq!(
            verify_at(Some(SIG), "lin_wh_test_secret", BODY, NOW + 301),
            Err(Rejection::TimestampOutsideWindow)
        );
        assert_eq!(
            verify_at(Some(SIG), "lin_wh_test_secret", BODY, NOW - 301),
            Err(Rejection::TimestampOutsideWindow)
        );
    }

    #[test]
    fn keyed_by_delivery_typed_by_type_and_action() {
        let event = Linear
            .identify(&request(None, BODY))
            .unwrap()
            .expect_event();
        assert_eq!(event.id, "234d1a4e-b617-4388-90fe-adc3633d6b72");
        assert_eq!(event.kind, "Issue.create");
    }
}
