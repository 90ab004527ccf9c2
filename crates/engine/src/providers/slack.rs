//! Slack (Events API): `X-Slack-Signature: v0=<hex>`, an HMAC-SHA256 of
//! `"v0:{X-Slack-Request-Timestamp}:{body}"` under the app's signing secret,
//! with a five-minute window by default. The dedupe key is the body's
//! `event_id` (Slack retries with the same one). A `url_verification` request
//! is a handshake, answered with its `challenge`, and is not an event.

use serde::Deserialize;

use super::{
    hex_tag, required_header, verdict, ConfigError, EventIdentity, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};

pub struct Slack;

pub fn build(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(Slack))
}

impl Provider for Slack {
    fn name(&self) -> &'static str {
        "slack"
    }

    /// The id is in the signed body: no fence beyond it.
    fn replay_fence(&self, _req: &RawRequest) -> Option<String> {
        None
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header =
            required_header(req, "x-slack-signature").ok_or(Rejection::MissingSignature)?;
        let timestamp_text =
            required_header(req, "x-slack-request-timestamp").ok_or(Rejection::MissingSignature)?;
        let timestamp: u64 = timestamp_text
            .parse()
            .map_err(|_| Rejection::MalformedSignature)?;
        let candidate = hex_tag(header, "v0=")?;
        let signed: [&[u8]; 4] = [b"v0:", timestamp_text.as_bytes(), b":", &req.body];
        verdict(
            "X-Slack-Signature v0: HMAC-SHA256 of v0:timestamp:body",
            ctx.secrets.any_signed(&signed, &[candidate]),
            Some(timestamp),
            ctx,
        )
    }

    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        #[derive(Deserialize)]
        struct Envelope {
            #[serde(rename = "type")]
            kind: Option<String>,
            event_id: Option<String>,
            challenge: Option<String>,
            event: Option<Inner>,
        }
        #[derive(Deserialize)]
        struct Inner {
            #[serde(rename = "type")]
            kind: Option<String>,
        }
        let envelope: Envelope = req.json()?;
        if envelope.kind.as_deref() == Some("url_verification") {
            let challenge = envelope.challenge.ok_or_else(|| {
                Rejection::MalformedBody("url_verification without challenge".into())
            })?;
            let reply = serde_json::json!({ "challenge": challenge }).to_string();
            return Ok(Identity::Handshake(reply));
        }
        let id = envelope
            .event_id
            .filter(|id| !id.is_empty())
            .ok_or(Rejection::MissingEventId)?;
        let kind = envelope
            .event
            .and_then(|inner| inner.kind)
            .or(envelope.kind)
            .unwrap_or_else(|| "event".into());
        Ok(Identity::Event(EventIdentity { id, kind }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing;
    use crate::signature::Secrets;

    // Slack's documented example ("Verifying requests from Slack").
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: u64 = 1_531_420_618;
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn request(sig: Option<&str>, ts: &str, body: &str) -> RawRequest {
        let headers = [
            ("X-Slack-Request-Timestamp", Some(ts)),
            ("X-Slack-Signature", sig),
        ];
        testing::request(&headers, body)
    }

    fn verify_at(sig: &str, secrets: &str, now: u64) -> Result<(), Rejection> {
        let secrets = Secrets::split(secrets);
        let ctx = testing::context(&secrets, now);
        Slack
            .verify(&request(Some(sig), &TS.to_string(), BODY), &ctx)
            .map(drop)
    }

    #[test]
    fn slacks_documented_example_verifies() {
        assert_eq!(verify_at(SIG, SECRET, TS), Ok(()));
        assert_eq!(verify_at(SIG, &format!("old {SECRET}"), TS), Ok(()));
        assert_eq!(verify_at(SIG, "bogus", TS), Err(Rejection::BadSignature));
    }

    #[test]
    fn stale_future_missing_and_garbled() {
        assert_eq!(
            verify_at(SIG, SECRET, TS + 301),
            Err(Rejection::TimestampOutsideWindow)
        );
        assert_eq!(
            verify_at(SIG, SECRET, TS - 301),
            Err(Rejection::TimestampOutsideWindow)
        );
        assert_eq!(
            verify_at(&SIG.replace("v0=", "v1="), SECRET, TS),
            Err(Rejection::MalformedSignature)
        );
        assert_eq!(
            verify_at("v0=abc", SECRET, TS),
            Err(Rejection::MalformedSignature)
        );
        let secrets = Secrets::split(SECRET);
        let ctx = testing::context(&secrets, TS);
        assert_eq!(
            Slack.verify(&request(None, &TS.to_string(), BODY), &ctx),
            Err(Rejection::MissingSignature)
        );
        assert_eq!(
            Slack.verify(&request(Some(SIG), "soon", BODY), &ctx),
            Err(Rejection::MalformedSignature)
        );
    }

    #[test]
    fn url_verification_is_a_handshake() {
        let body = r#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        assert_eq!(
            Slack.identify(&request(None, "1", body)).unwrap(),
            Identity::Handshake(
                r#"{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#.into()
            )
        );
    }

    #[test]
    fn an_event_callback_is_keyed_by_event_id() {
        let body =
            r#"{"type":"event_callback","event_id":"Ev0PV52K21","event":{"type":"app_mention"}}"#;
        let event = Slack
            .identify(&request(None, "1", body))
            .unwrap()
            .expect_event();
        assert_eq!(
            event,
            EventIdentity {
                id: "Ev0PV52K21".into(),
                kind: "app_mention".into()
            }
        );
        let no_id = r#"{"type":"event_callback","event":{"type":"app_mention"}}"#;
        assert_eq!(
            Slack.identify(&request(None, "1", no_id)),
            Err(Rejection::MissingEventId)
        );
    }
}
