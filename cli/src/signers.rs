//! How each provider signs, written here again on purpose: the CLI checks the
//! worker, so it shares no code with it. The events it signs are in
//! `fixtures.rs`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::Sha256;

pub use crate::fixtures::{fixture, Fixture, PROVIDERS};
// needs one of: standard-webhooks, svix
use crate::fixtures::header_prefix;

/// Standard base64, as several providers send signatures and keys.
pub fn base64_encode(bytes: impl AsRef<[u8]>) -> String {
    BASE64.encode(bytes)
}

pub fn hmac256(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

pub fn hmac1(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha1>::new_from_slice(key).expect("any key length");
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

/// A webhook ready to send: body, headers, and the event id the provider
/// guarantees stable (what the worker deduplicates on).
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event_id: String,
    pub body: String,
    pub headers: Vec<(String, String)>,
}

/// The value of the header `name` among `headers`, or "".
pub fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map_or("", |(_, v)| v.as_str())
}

/// What a signature covers: the secret, the body, the URL it is sent to,
/// the fixture's id headers and the time (each scheme reads some of them).
pub struct Signing<'a> {
    pub secret: &'a str,
    pub body: &'a str,
    pub url: &'a str,
    pub id_headers: &'a [(String, String)],
    pub now: u64,
}

/// One signature header.
pub fn signature(name: &str, value: String) -> Vec<(String, String)> {
    vec![(name.to_string(), value)]
}

/// The signature header(s) for `body` as `provider` would send it to `url`
/// at `now`, given the id headers of the fixture.
pub fn sign(
    provider: &str,
    secret: &str,
    body: &str,
    url: &str,
    id_headers: &[(String, String)],
    now: u64,
) -> Result<Vec<(String, String)>, String> {
    let s = Signing {
        secret,
        body,
        url,
        id_headers,
        now,
    };
    Ok(match provider {
        "stripe" => signature(
            "stripe-signature",
            format!(
                "t={},v1={}",
                s.now,
                hex::encode(hmac256(
                    s.secret.as_bytes(),
                    format!("{}.{}", s.now, s.body).as_bytes()
                ))
            ),
        ),
        "github" => signature(
            "x-hub-signature-256",
            format!(
                "sha256={}",
                hex::encode(hmac256(s.secret.as_bytes(), s.body.as_bytes()))
            ),
        ),
        "standard-webhooks" | "svix" => {
            let prefix = header_prefix(provider);
            let raw = BASE64
                .decode(s.secret.strip_prefix("whsec_").unwrap_or(s.secret))
                .map_err(|_| "a Standard Webhooks secret is whsec_<base64>".to_string())?;
            let id = header_value(s.id_headers, &format!("{prefix}-id"));
            let ts = header_value(s.id_headers, &format!("{prefix}-timestamp"));
            let signed = format!("{id}.{ts}.{}", s.body);
            signature(
                &format!("{prefix}-signature"),
                format!("v1,{}", base64_encode(hmac256(&raw, signed.as_bytes()))),
            )
        }
        "shopify" => signature(
            "x-shopify-hmac-sha256",
            base64_encode(hmac256(s.secret.as_bytes(), s.body.as_bytes())),
        ),
        "slack" => {
            let ts = header_value(s.id_headers, "x-slack-request-timestamp");
            signature(
                "x-slack-signature",
                format!(
                    "v0={}",
                    hex::encode(hmac256(
                        s.secret.as_bytes(),
                        format!("v0:{ts}:{}", s.body).as_bytes()
                    ))
                ),
            )
        }
        "linear" => signature(
            "linear-signature",
            hex::encode(hmac256(s.secret.as_bytes(), s.body.as_bytes())),
        ),
        "paddle" => signature(
            "paddle-signature",
            format!(
                "ts={};h1={}",
                s.now,
                hex::encode(hmac256(
                    s.secret.as_bytes(),
                    format!("{}:{}", s.now, s.body).as_bytes()
                ))
            ),
        ),
        "twilio" => {
            let mut params: Vec<(String, String)> = form_urlencoded::parse(s.body.as_bytes())
                .into_owned()
                .collect();
            params.sort();
            let signed: String = std::iter::once(s.url.to_string())
                .chain(params.into_iter().map(|(n, v)| n + &v))
                .collect();
            signature(
                "x-twilio-signature",
                base64_encode(hmac1(s.secret.as_bytes(), signed.as_bytes())),
            )
        }
        "hmac" => {
            let ts = header_value(s.id_headers, "x-acme-timestamp");
            let tag = hmac256(s.secret.as_bytes(), format!("{ts}.{}", s.body).as_bytes());
            signature("x-acme-signature", format!("sha256={}", hex::encode(tag)))
        }
        other => return Err(format!("unknown provider '{other}'")),
    })
}

/// A signed delivery of a fixture (or of `body`, for a provider whose id the
/// body carries) with the id `id`.
pub fn delivery(
    provider: &str,
    secret: &str,
    url: &str,
    id: &str,
    body: Option<String>,
    now: u64,
) -> Result<Delivery, String> {
    let Fixture {
        body: fixture_body,
        mut headers,
    } = fixture(provider, id, now)?;
    let body = body.unwrap_or(fixture_body);
    let signature = sign(provider, secret, &body, url, &headers, now)?;
    headers.extend(signature);
    Ok(Delivery {
        event_id: id.to_string(),
        body,
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // needs one of: standard-webhooks, slack
    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn github_documented_example() {
        let signed = sign(
            "github",
            "It's a Secret to Everybody",
            "Hello, World!",
            "",
            &[],
            0,
        )
        .unwrap();
        assert_eq!(
            signed[0].1,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }

    #[test]
    fn standard_webhooks_reference_vector() {
        let ids = headers(&[
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("webhook-timestamp", "1614265330"),
        ]);
        let signed = sign(
            "standard-webhooks",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            r#"{"test": 2432232314}"#,
            "",
            &ids,
            0,
        )
        .unwrap();
        assert_eq!(
            signed[0],
            (
                "webhook-signature".into(),
                "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".into()
            )
        );
    }

    #[test]
    fn slack_documented_example() {
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let ids = headers(&[("x-slack-request-timestamp", "1531420618")]);
        let signed = sign(
            "slack",
            "8f742231b10e8888abcd99yyyzzz85a5",
            body,
            "",
            &ids,
            0,
        )
        .unwrap();
        assert_eq!(
            signed[0].1,
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
    }

    #[test]
    fn twilio_documented_example() {
        let body = "To=%2B18005551212&CallSid=CA1234567890ABCDE&Digits=1234&From=%2B12349013030&Caller=%2B12349013030";
        let signed = sign(
            "twilio",
            "12345",
            body,
            "https://mycompany.com/myapp.php?foo=1&bar=2",
            &[],
            0,
        )
        .unwrap();
        assert_eq!(signed[0].1, "0/KCTR6DLpKmkAf8muzZqo1nDgQ=");
    }

    #[test]
    fn every_provider_has_a_fixture_and_a_signer() {
        for &provider in PROVIDERS {
            // A whsec_ secret: one any provider takes.
            let secret = "whsec_c2VsZnRlc3Q=";
            let d = delivery(
                provider,
                secret,
                "http://localhost/webhooks/x",
                "id-1",
                None,
                1_700_000_000,
            )
            .unwrap();
            assert!(!d.headers.is_empty(), "{provider}");
        }
        assert!(fixture("carrier-pigeon", "x", 0).is_err());
    }
}
