//! Shopify: `X-Shopify-Hmac-Sha256` is the base64 HMAC-SHA256 of the raw
//! body under the app's client secret. No timestamp is signed. The dedupe key
//! is `X-Shopify-Event-Id` (the same on every retry of one event; each topic
//! subscription gets its own), the type `X-Shopify-Topic`.

use super::{
    header_identity, required_header, verdict, ConfigError, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};
use crate::signature::base64_decode;

pub struct Shopify;

pub fn build(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(Shopify))
}

impl Provider for Shopify {
    fn name(&self) -> &'static str {
        "shopify"
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header =
            required_header(req, "x-shopify-hmac-sha256").ok_or(Rejection::MissingSignature)?;
        let candidate = base64_decode(header).ok_or(Rejection::MalformedSignature)?;
        verdict(
            "X-Shopify-Hmac-Sha256: HMAC-SHA256 (base64) of the body",
            ctx.secrets.any_signed(&[&req.body], &[candidate]),
            None,
            ctx,
        )
    }

    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        header_identity(req, "x-shopify-event-id", req.header("x-shopify-topic"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing;
    use crate::providers::EventIdentity;
    use crate::signature::Secrets;

    const BODY: &str = r#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    // Computed independently with Python's hmac and base64 modules.
    const SIG: &str = "LnwdZPLBbdjkBwPD/lDL1/rYEGby/GHPtL1aAH6Dxjc=";

    fn request(headers: &[(&str, &str)], body: &str) -> RawRequest {
        let headers: Vec<_> = headers.iter().map(|&(n, v)| (n, Some(v))).collect();
        testing::request(&headers, body)
    }

    fn verify(sig: Option<&str>, secrets: &str, body: &str) -> Result<(), Rejection> {
        let secrets = Secrets::split(secrets);
        let ctx = testing::context(&secrets, 0);
        let req = testing::request(&[("X-Shopify-Hmac-Sha256", sig)], body);
        Shopify.verify(&req, &ctx).map(drop)
    }

    #[test]
    fn verifies_and_rotates() {
        assert_eq!(verify(Some(SIG), "shpss_test_secret", BODY), Ok(()));
        assert_eq!(verify(Some(SIG), "old shpss_test_secret", BODY), Ok(()));
        assert_eq!(
            verify(Some(SIG), "other", BODY),
            Err(Rejection::BadSignature)
        );
        assert_eq!(
            verify(Some(SIG), "shpss_test_secret", "{}"),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn rejects_missing_and_garbled_headers() {
        assert_eq!(verify(None, "s", BODY), Err(Rejection::MissingSignature));
        assert_eq!(
            verify(Some("not base64!"), "s", BODY),
            Err(Rejection::MalformedSignature)
        );
        assert_eq!(
            verify(Some("c2hvcnQ="), "s", BODY),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn identified_by_event_id_and_topic() {
        let req = request(
            &[
                ("X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5"),
                ("X-Shopify-Topic", "customers/create"),
            ],
            BODY,
        );
        assert_eq!(
            Shopify.identify(&req).unwrap().expect_event(),
            EventIdentity {
                id: "98880550-7158-44d4-b7cd-2c97c8a091b5".into(),
                kind: "customers/create".into()
            }
        );
        assert_eq!(
            Shopify.identify(&request(&[], BODY)),
            Err(Rejection::MissingEventId)
        );
    }
}
