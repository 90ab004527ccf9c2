//! Fixtures: a small event of each provider the CLI signs for, with a fresh
//! id and the headers that carry it.

/// Every provider the CLI signs for.
pub const PROVIDERS: &[&str] = &[
    "stripe",
    "github",
    "standard-webhooks",
    "svix",
    "shopify",
    "slack",
    "linear",
    "paddle",
    "twilio",
    "hmac",
];

/// A fixture event: its body, and the headers that carry its id (and
/// timestamp).
pub struct Fixture {
    pub body: String,
    pub headers: Vec<(String, String)>,
}

/// A header as a name and value.
pub fn pair(name: &str, value: &str) -> (String, String) {
    (name.to_string(), value.to_string())
}

/// What a fixture is made of: its id and time (each provider's reads some).
pub struct Fresh<'a> {
    pub id: &'a str,
    pub now: u64,
}

// needs one of: standard-webhooks, svix
/// The Standard Webhooks headers' prefix: `webhook-`, or the name of a
/// provider that sends the scheme under its own (`{name}-id`, …).
pub fn header_prefix(provider: &str) -> &str {
    if provider == "standard-webhooks" {
        "webhook"
    } else {
        provider
    }
}

/// A fixture event of `provider` with the id `id`, made at `now`.
pub fn fixture(provider: &str, id: &str, now: u64) -> Result<Fixture, String> {
    let e = Fresh { id, now };
    let (body, headers): (String, Vec<(String, String)>) = match provider {
        "stripe" => (
            format!(
                r#"{{"id":"{id}","object":"event","type":"checkout.session.completed","created":{now},"data":{{"object":{{"id":"cs_{id}","object":"checkout.session","amount_total":1999,"currency":"usd","customer_details":{{"email":"selftest@example.com"}},"payment_intent":"pi_{id}","payment_status":"paid"}}}}}}"#,
                id = e.id,
                now = e.now
            ),
            vec![],
        ),
        // Where the id is an unsigned header, the worker fences on the body
        // too, so distinct events need distinct bodies (as real ones have).
        "github" => (
            format!(
                r#"{{"action":"opened","issue":{{"title":"selftest {id}"}},"repository":{{"full_name":"selftest/repo"}}}}"#,
                id = e.id
            ),
            vec![
                pair("x-github-delivery", e.id),
                pair("x-github-event", "issues"),
            ],
        ),
        "standard-webhooks" | "svix" => {
            let prefix = header_prefix(provider);
            (
                r#"{"type":"selftest.ping","data":{}}"#.into(),
                vec![
                    (format!("{prefix}-id"), e.id.into()),
                    (format!("{prefix}-timestamp"), e.now.to_string()),
                ],
            )
        }
        "shopify" => (
            format!(
                r#"{{"id":"{id}","email":"selftest@example.com"}}"#,
                id = e.id
            ),
            vec![
                pair("x-shopify-event-id", e.id),
                pair("x-shopify-topic", "customers/create"),
            ],
        ),
        "slack" => (
            format!(
                r#"{{"type":"event_callback","event_id":"{id}","event":{{"type":"app_mention"}}}}"#,
                id = e.id
            ),
            vec![pair("x-slack-request-timestamp", &e.now.to_string())],
        ),
        "linear" => (
            format!(
                r#"{{"action":"create","type":"Issue","data":{{"id":"{id}"}},"webhookTimestamp":{}}}"#,
                e.now * 1000
            ),
            vec![pair("linear-delivery", e.id)],
        ),
        "paddle" => (
            format!(
                r#"{{"event_id":"{id}","event_type":"transaction.completed","data":{{}}}}"#,
                id = e.id
            ),
            vec![],
        ),
        "twilio" => (
            format!("MessageSid=SM{id}&MessageStatus=delivered"),
            vec![
                pair("i-twilio-idempotency-token", e.id),
                pair("content-type", "application/x-www-form-urlencoded"),
            ],
        ),
        // A generic HMAC source shaped like the template's `acme` example.
        "hmac" => (
            format!(r#"{{"id":"{id}","type":"selftest.ping"}}"#, id = e.id),
            vec![pair("x-acme-timestamp", &e.now.to_string())],
        ),
        other => {
            return Err(format!(
                "unknown provider '{other}' (one of: {})",
                PROVIDERS.join(", ")
            ))
        }
    };
    Ok(Fixture { body, headers })
}
