//! How each provider signs, written here again on purpose: the CLI checks the
//! worker, so it shares no code with it. Fixtures are small events of each
//! provider with a fresh id.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::Sha256;

pub const PROVIDERS: [&str; 9] = [
    "stripe",
    "github",
    "standard-webhooks",
    "svix",
    "shopify",
    "slack",
    "linear",
    "paddle",
    "twilio",
];

fn hmac256(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

fn hmac1(key: &[u8], content: &[u8]) -> Vec<u8> {
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
    /// How many side effects the worker's demo effects attach to this event.
    pub side_effects: usize,
}

/// A fixture event: its body, the headers that carry its id (and
/// timestamp), and how many side effects the worker's demo effects attach.
pub struct Fixture {
    pub body: String,
    pub headers: Vec<(String, String)>,
    pub side_effects: usize,
}

/// A fixture event of `provider` with the id `id`.
pub fn fixture(provider: &str, id: &str, now: u64) -> Result<Fixture, String> {
    let h = |name: &str, value: &str| (name.to_string(), value.to_string());
    let (body, headers, side_effects): (String, Vec<(String, String)>, usize) = match provider {
        "stripe" => (
            format!(
                r#"{{"id":"{id}","object":"event","type":"checkout.session.completed","created":{now},"data":{{"object":{{"id":"cs_{id}","object":"checkout.session","amount_total":1999,"currency":"usd","customer_details":{{"email":"selftest@example.com"}},"payment_intent":"pi_{id}","payment_status":"paid"}}}}}}"#
            ),
            vec![],
            1,
        ),
        // Where the id is an unsigned header, the worker fences on the body
        // too, so distinct events need distinct bodies (as real ones have).
        "github" => (
            format!(
                r#"{{"action":"created","starred_at":"{now}","repository":{{"full_name":"selftest/repo"}},"sender":{{"login":"selftest-{id}"}}}}"#
            ),
            vec![h("x-github-delivery", id), h("x-github-event", "star")],
            1,
        ),
        "standard-webhooks" | "svix" => {
            let prefix = if provider == "svix" {
                "svix"
            } else {
                "webhook"
            };
            (
                r#"{"type":"selftest.ping","data":{}}"#.into(),
                vec![
                    (format!("{prefix}-id"), id.into()),
                    (format!("{prefix}-timestamp"), now.to_string()),
                ],
                0,
            )
        }
        "shopify" => (
            format!(r#"{{"id":"{id}","email":"selftest@example.com"}}"#),
            vec![
                h("x-shopify-event-id", id),
                h("x-shopify-topic", "orders/create"),
            ],
            0,
        ),
        "slack" => (
            format!(
                r#"{{"type":"event_callback","event_id":"{id}","event":{{"type":"app_mention"}}}}"#
            ),
            vec![h("x-slack-request-timestamp", &now.to_string())],
            0,
        ),
        "linear" => (
            format!(
                r#"{{"action":"create","type":"Issue","data":{{"id":"{id}"}},"webhookTimestamp":{}}}"#,
                now * 1000
            ),
            vec![h("linear-delivery", id)],
            0,
        ),
        "paddle" => (
            format!(r#"{{"event_id":"{id}","event_type":"transaction.completed","data":{{}}}}"#),
            vec![],
            0,
        ),
        "twilio" => (
            format!("MessageSid=SM{id}&MessageStatus=delivered"),
            vec![
                h("i-twilio-idempotency-token", id),
                h("content-type", "application/x-www-form-urlencoded"),
            ],
            0,
        ),
        other => {
            return Err(format!(
                "unknown provider '{other}' (one of: {})",
                PROVIDERS.join(", ")
            ))
        }
    };
    Ok(Fixture {
        body,
        headers,
        side_effects,
    })
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map_or("", |(_, v)| v.as_str())
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
    let key = secret.as_bytes();
    let b = body.as_bytes();
    let h = |name: &str, value: String| vec![(name.to_string(), value)];
    Ok(match provider {
        "stripe" => h(
            "stripe-signature",
            format!(
                "t={now},v1={}",
                hex::encode(hmac256(key, format!("{now}.{body}").as_bytes()))
            ),
        ),
        "github" => h(
            "x-hub-signature-256",
            format!("sha256={}", hex::encode(hmac256(key, b))),
        ),
        "standard-webhooks" | "svix" => {
            let prefix = if provider == "svix" {
                "svix"
            } else {
                "webhook"
            };
            let raw = BASE64
                .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
                .map_err(|_| "a Standard Webhooks secret is whsec_<base64>".to_string())?;
            let id = header(id_headers, &format!("{prefix}-id"));
            let ts = header(id_headers, &format!("{prefix}-timestamp"));
            let signed = format!("{id}.{ts}.{body}");
            h(
                &format!("{prefix}-signature"),
                format!("v1,{}", BASE64.encode(hmac256(&raw, signed.as_bytes()))),
            )
        }
        "shopify" => h("x-shopify-hmac-sha256", BASE64.encode(hmac256(key, b))),
        "slack" => {
            let ts = header(id_headers, "x-slack-request-timestamp");
            h(
                "x-slack-signature",
                format!(
                    "v0={}",
                    hex::encode(hmac256(key, format!("v0:{ts}:{body}").as_bytes()))
                ),
            )
        }
        "linear" => h("linear-signature", hex::encode(hmac256(key, b))),
        "paddle" => h(
            "paddle-signature",
            format!(
                "ts={now};h1={}",
                hex::encode(hmac256(key, format!("{now}:{body}").as_bytes()))
            ),
        ),
        "twilio" => {
            let mut params: Vec<(String, String)> =
                form_urlencoded::parse(b).into_owned().collect();
            params.sort();
            let signed: String = std::iter::once(url.to_string())
                .chain(params.into_iter().map(|(n, v)| n + &v))
                .collect();
            h(
                "x-twilio-signature",
                BASE64.encode(hmac1(key, signed.as_bytes())),
            )
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
        side_effects,
    } = fixture(provider, id, now)?;
    let body = body.unwrap_or(fixture_body);
    let signature = sign(provider, secret, &body, url, &headers, now)?;
    headers.extend(signature);
    Ok(Delivery {
        event_id: id.to_string(),
        body,
        headers,
        side_effects,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for provider in PROVIDERS {
            let secret = if provider.contains("webhooks") || provider == "svix" {
                "whsec_c2VsZnRlc3Q="
            } else {
                "s"
            };
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
