//! Generated requests for the property fuzz: each provider's signed
//! delivery (through the self-test CLI's signers), the headers it signs,
//! and the mutations' helpers.
// needs: everything

use hmac::{Hmac, Mac};
use proptest::prelude::*;
use selftest::signers;
use sha2::Sha256;
use webhook_engine::providers::{testing, Provider, RawRequest, SourceConfig, VerifyContext};
use webhook_engine::signature::Secrets;

/// Valid for every provider: at least 8 bytes, and a `whsec_` that decodes
/// to 24 bytes for Standard Webhooks and Svix.
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const URL: &str = "https://example.com/webhooks/source";
pub const TOLERANCE: u64 = 300;
pub const NOW: u64 = 1_800_000_000;

/// Every provider the CLI signs for (its `hmac` with this file's own
/// source shape, see [`source`]).
pub fn providers() -> Vec<&'static str> {
    signers::PROVIDERS.to_vec()
}

pub fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(20_000);
    ProptestConfig {
        cases,
        // Mutations of a header some providers do not sign are skipped.
        max_global_rejects: cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The source settings for a provider; `hmac` is a generic source whose key
/// and timestamp come from headers.
pub fn source(provider: &str) -> SourceConfig {
    let mut config = SourceConfig::new(provider);
    if provider == "hmac" {
        config.header = Some("X-Sig".into());
        config.prefix = Some("sha256=".into());
        config.signed = Some("{timestamp}.{body}".into());
        config.timestamp_header = Some("X-Ts".into());
        config.key = Some("header:X-Delivery".into());
        config.event_type = Some("json:/type".into());
    }
    config
}

/// The app as the worker starts it: these effects, no provider of its own.
static APP: webhook_engine::App = webhook_engine::App::new(idempotent_webhooks::effects::EFFECTS);

pub fn build(provider: &str) -> Box<dyn Provider> {
    webhook_engine::start(&APP);
    webhook_engine::unstable::build_provider(&source(provider), &[]).expect("a known provider")
}

pub fn context(secrets: &Secrets) -> VerifyContext<'_> {
    let mut context = testing::context(secrets, NOW);
    context.tolerance = TOLERANCE;
    context
}

/// Percent-encodes a form value.
pub fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A body of the provider's shape, with `id` where the provider reads it
/// and `payload` somewhere inside, signed at `ts`.
pub fn body(provider: &str, id: &str, ts: u64, payload: &str) -> String {
    use serde_json::json;
    let value = match provider {
        "stripe" => json!({"id": id, "type": "checkout.session.completed", "created": ts,
            "data": {"object": {"id": format!("cs_{id}"), "payment_status": "paid", "note": payload,
                "customer_details": {"email": "a@b.example"}, "amount_total": 100, "currency": "usd"}}}),
        "github" => json!({"action": "created", "starred_at": "2026-01-01T00:00:00Z",
            "repository": {"full_name": "o/r"}, "sender": {"login": payload}}),
        "slack" => {
            json!({"type": "event_callback", "event_id": id, "event": {"type": "app_mention", "text": payload}})
        }
        "paddle" => {
            json!({"event_id": id, "event_type": "transaction.completed", "data": {"note": payload}})
        }
        "linear" => {
            json!({"action": "create", "type": "Issue", "data": {"id": id, "title": payload},
            "webhookTimestamp": ts * 1000})
        }
        "twilio" => {
            return format!(
                "MessageSid=SM{}&Body={}&MessageStatus=delivered",
                form_encode(id),
                form_encode(payload)
            )
        }
        _ => json!({"id": id, "type": "note.created", "note": payload}),
    };
    value.to_string()
}

/// A validly signed request of `provider`, signed at `ts`.
pub fn signed(provider: &str, id: &str, ts: u64, payload: &str) -> RawRequest {
    let body = body(provider, id, ts, payload);
    let headers = if provider == "hmac" {
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(format!("{ts}.{body}").as_bytes());
        vec![
            (
                "X-Sig".into(),
                format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
            ),
            ("X-Ts".into(), ts.to_string()),
            ("X-Delivery".into(), id.to_string()),
        ]
    } else {
        // The fixture's id (and timestamp) headers, then the signature.
        let mut headers = signers::fixture(provider, id, ts).unwrap().headers;
        let signature = signers::sign(provider, SECRET, &body, URL, &headers, ts).unwrap();
        headers.extend(signature);
        headers
    };
    RawRequest::new(URL, headers, body.into_bytes())
}

/// The header that carries the signature.
pub fn signature_header(provider: &str) -> &'static str {
    match provider {
        "stripe" => "stripe-signature",
        "github" => "x-hub-signature-256",
        "standard-webhooks" => "webhook-signature",
        "svix" => "svix-signature",
        "shopify" => "x-shopify-hmac-sha256",
        "slack" => "x-slack-signature",
        "linear" => "linear-signature",
        "paddle" => "paddle-signature",
        "twilio" => "x-twilio-signature",
        _ => "x-sig",
    }
}

/// Headers the signature covers besides itself (an id, a timestamp).
pub fn signed_headers(provider: &str) -> &'static [&'static str] {
    match provider {
        "standard-webhooks" => &["webhook-id", "webhook-timestamp"],
        "svix" => &["svix-id", "svix-timestamp"],
        "slack" => &["x-slack-request-timestamp"],
        "hmac" => &["x-ts"],
        _ => &[],
    }
}

/// The request's headers, lower-cased, as a list to rebuild it from.
pub fn headers_of(req: &RawRequest, names: &[&str]) -> Vec<(String, String)> {
    names
        .iter()
        .filter_map(|name| req.header(name).map(|v| (name.to_string(), v.to_string())))
        .collect()
}

pub const ALL_HEADERS: [&str; 22] = [
    "stripe-signature",
    "x-hub-signature-256",
    "x-github-delivery",
    "x-github-event",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "x-shopify-hmac-sha256",
    "x-shopify-event-id",
    "x-shopify-topic",
    "x-slack-signature",
    "x-slack-request-timestamp",
    "linear-signature",
    "linear-delivery",
    "paddle-signature",
    "x-twilio-signature",
    "i-twilio-idempotency-token",
    "content-type",
    "x-sig",
];

pub fn with_header(req: &RawRequest, name: &str, value: String) -> RawRequest {
    let mut headers: Vec<(String, String)> = headers_of(req, &ALL_HEADERS)
        .into_iter()
        .chain(headers_of(req, &["x-ts", "x-delivery"]))
        .filter(|(n, _)| n != name)
        .collect();
    headers.push((name.to_string(), value));
    RawRequest::new(req.url.clone(), headers, req.body.clone())
}

/// What Twilio signs of a form after the URL, decoded here on its own (not
/// with the worker's decoder), as the WHATWG form decoding does: each pair's
/// name and value, `+` as a space, `%XX` as its byte (a malformed escape
/// kept as sent, bytes that are not UTF-8 as U+FFFD), sorted, joined.
/// `None` for a body that is not UTF-8.
pub fn signed_form(body: &[u8]) -> Option<String> {
    fn decode(text: &str) -> Option<String> {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let escaped = (bytes[i] == b'%')
                .then(|| bytes.get(i + 1..i + 3))
                .flatten()
                .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
                .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
            match (bytes[i], escaped) {
                (_, Some(byte)) => {
                    out.push(byte);
                    i += 3;
                }
                (b'+', None) => {
                    out.push(b' ');
                    i += 1;
                }
                (other, None) => {
                    out.push(other);
                    i += 1;
                }
            }
        }
        Some(String::from_utf8_lossy(&out).into_owned())
    }
    let text = std::str::from_utf8(body).ok()?;
    let mut pairs = text
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((decode(name)?, decode(value)?))
        })
        .collect::<Option<Vec<_>>>()?;
    pairs.sort();
    Some(pairs.into_iter().map(|(n, v)| n + &v).collect())
}

/// Flips `xor` into the byte at `at` (modulo the length) of `text`.
pub fn flip(text: &[u8], at: usize, xor: u8) -> Vec<u8> {
    let mut bytes = text.to_vec();
    if !bytes.is_empty() {
        let i = at % bytes.len();
        bytes[i] ^= xor;
    }
    bytes
}
