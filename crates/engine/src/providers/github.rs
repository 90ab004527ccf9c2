//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, an HMAC-SHA256 of the raw
//! body under the webhook's secret. GitHub signs no timestamp, so there is no
//! replay window; the ledger makes a replay harmless instead.
//!
//! The dedupe key is `X-GitHub-Delivery`, which a manual redelivery keeps.
//! GitHub never retries on its own: a lost reply loses the event, which is why
//! the inbox answers as soon as the event is durably recorded.

use serde::Deserialize;

use super::{
    hex_tag, required_header, verdict, ConfigError, EventIdentity, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};

pub struct GitHub;

pub fn build(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(GitHub))
}

impl Provider for GitHub {
    fn name(&self) -> &'static str {
        "github"
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header =
            required_header(req, "x-hub-signature-256").ok_or(Rejection::MissingSignature)?;
        let candidate = hex_tag(header, "sha256=")?;
        verdict(
            "X-Hub-Signature-256: HMAC-SHA256 of the body",
            ctx.secrets.any_signed(&[&req.body], &[candidate]),
            None,
            ctx,
        )
    }

    /// The type is `X-GitHub-Event`, refined by the body's `action` when it
    /// has one (`issues.opened`), so the ledger says what happened.
    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        #[derive(Deserialize)]
        struct Envelope {
            action: Option<String>,
        }
        let id = required_header(req, "x-github-delivery").ok_or(Rejection::MissingEventId)?;
        let event = required_header(req, "x-github-event")
            .ok_or_else(|| Rejection::MalformedBody("no X-GitHub-Event header".into()))?;
        let envelope: Envelope = req.json()?;
        let kind = match envelope.action {
            Some(action) => format!("{event}.{action}"),
            None => event.to_string(),
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
    use crate::signature::{Secrets, Tag};

    /// GitHub's documented example ("Validating webhook deliveries"):
    /// secret "It's a Secret to Everybody", payload "Hello, World!".
    const DOC_SECRET: &str = "It's a Secret to Everybody";
    const DOC_BODY: &str = "Hello, World!";
    const DOC_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn request(headers: &[(&str, &str)], body: &str) -> RawRequest {
        let headers: Vec<_> = headers.iter().map(|&(n, v)| (n, Some(v))).collect();
        testing::request(&headers, body)
    }

    fn verify_with(
        signature: Option<&str>,
        secrets: &Secrets,
        body: &str,
    ) -> Result<(), Rejection> {
        let req = testing::request(&[("X-Hub-Signature-256", signature)], body);
        GitHub.verify(&req, &testing::context(secrets, 0)).map(drop)
    }

    fn verify(signature: Option<&str>, secrets: &str, body: &str) -> Result<(), Rejection> {
        verify_with(signature, &Secrets::split(secrets), body)
    }

    #[test]
    fn accepts_githubs_documented_example() {
        // The documented secret has spaces, which the variable syntax would
        // split; real secrets are generated without them.
        let secrets = Secrets::from_raw(&[DOC_SECRET.as_bytes()]);
        assert_eq!(verify_with(Some(DOC_SIG), &secrets, DOC_BODY), Ok(()));
        assert_eq!(
            verify_with(Some(DOC_SIG), &secrets, "Hello, World?"),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn accepts_a_valid_signature_and_rotated_secrets() {
        let sig = format!("sha256={}", Tag::sha256(b"s3cret", &[b"{}"]).to_hex());
        assert_eq!(verify(Some(&sig), "s3cret", "{}"), Ok(()));
        assert_eq!(verify(Some(&sig), "old-one,s3cret", "{}"), Ok(()));
        assert_eq!(
            verify(Some(&sig), "old-one", "{}"),
            Err(Rejection::BadSignature)
        );
        assert_eq!(
            verify(Some(&sig), "s3cret", "{ }"),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn rejects_missing_empty_and_garbled_headers() {
        assert_eq!(verify(None, "s", "{}"), Err(Rejection::MissingSignature));
        assert_eq!(
            verify(Some(""), "s", "{}"),
            Err(Rejection::MissingSignature)
        );
        for garbled in [
            "sha1=abcd",
            &DOC_SIG[7..],
            "sha256=xyz",
            "sha256=",
            "sha256=abcd",
        ] {
            let got = verify(Some(garbled), "s", "{}");
            assert_eq!(got, Err(Rejection::MalformedSignature), "{garbled}");
        }
    }

    #[test]
    fn identifies_by_delivery_header_and_typed_by_action() {
        let req = request(
            &[("X-GitHub-Delivery", "d-1"), ("X-GitHub-Event", "issues")],
            r#"{"action":"opened"}"#,
        );
        let id = GitHub.identify(&req).unwrap().expect_event();
        assert_eq!(
            id,
            EventIdentity {
                id: "d-1".into(),
                kind: "issues.opened".into()
            }
        );
        let ping = request(
            &[("X-GitHub-Delivery", "d-2"), ("X-GitHub-Event", "ping")],
            "{}",
        );
        assert_eq!(GitHub.identify(&ping).unwrap().expect_event().kind, "ping");
    }

    #[test]
    fn rejects_missing_delivery_id_and_non_json() {
        let no_id = request(&[("X-GitHub-Event", "issues")], "{}");
        assert_eq!(GitHub.identify(&no_id), Err(Rejection::MissingEventId));
        let form = request(
            &[("X-GitHub-Delivery", "d-1"), ("X-GitHub-Event", "issues")],
            "payload=%7B%7D",
        );
        assert!(matches!(
            GitHub.identify(&form),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
