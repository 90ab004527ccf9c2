//! Property fuzz of the pure half of a delivery: every provider's `verify`
//! and `identify`, and `effects::plan`, on generated requests — validly
//! signed ones, mutations of those, and arbitrary header maps and bodies.
//!
//! Requests are signed by the self-test CLI's signers (`cli/src/signers.rs`),
//! which share no code with the verifiers under test.
//!
//! Cases per property: `PROPTEST_CASES` (default 20,000, spread over the ten
//! providers: about 2,000 each). `make fuzz-props` runs 500,000.
// needs: everything

use idempotent_webhooks::effects::EFFECTS;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use webhook_engine::effects::plan_with;
use webhook_engine::event::VerifiedEvent;
use webhook_engine::providers::{Identity, Provider, RawRequest, Rejection};
use webhook_engine::signature::Secrets;

mod requests;

use requests::*;

/// An event as the worker hands it to the effects (its fence: the body's).
fn event(provider: &str, id: &str, kind: &str, body: &str) -> VerifiedEvent {
    let mut event = VerifiedEvent::example(provider, kind, body);
    event.id = id.into();
    event
}

/// Verifies, identifies and plans as the worker does, checking that
/// nothing panics and that `plan` of a verified body answers either way.
fn through(provider: &dyn Provider, req: &RawRequest) -> Result<bool, TestCaseError> {
    let secrets = Secrets::parse(SECRET).unwrap();
    let verified = provider.verify(req, &context(&secrets)).is_ok();
    // The worker identifies only what verified; here anything is identified,
    // so that identify sees arbitrary input too (it must not panic).
    let identified = provider.identify(req);
    if !verified {
        return Ok(false);
    }
    if let Ok(Identity::Event(identity)) = identified {
        let body = String::from_utf8_lossy(&req.body);
        let event = event(provider.name(), &identity.id, &identity.kind, &body);
        // Statements or a PlanError: both are answers; a panic is not.
        let _ = plan_with(EFFECTS, &event, 2);
    }
    Ok(true)
}

#[derive(Debug, Clone)]
enum Mutation {
    /// XOR a byte of the body.
    Body(usize, u8),
    /// XOR a byte of the signature header.
    Signature(usize, u8),
    /// XOR a byte of another signed header (id, timestamp).
    SignedHeader(usize, usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, x)| Mutation::Body(at, x)),
        (any::<usize>(), 1..=255u8).prop_map(|(at, x)| Mutation::Signature(at, x)),
        (any::<usize>(), any::<usize>(), 1..=255u8)
            .prop_map(|(which, at, x)| Mutation::SignedHeader(which, at, x)),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// An unmutated signed request always verifies, anywhere in the window,
    /// and is identified by the id it was signed with.
    #[test]
    fn a_signed_request_verifies_within_the_window(
        provider in prop::sample::select(providers()),
        id in "[A-Za-z0-9_:.é€-]{1,300}",
        payload in any::<String>(),
        offset in -(TOLERANCE as i64)..=(TOLERANCE as i64),
    ) {
        let p = build(provider);
        let ts = (NOW as i64 + offset) as u64;
        let req = signed(provider, &id, ts, &payload);
        let secrets = Secrets::parse(SECRET).unwrap();
        let verified = p.verify(&req, &context(&secrets));
        prop_assert!(verified.is_ok(), "{}: {:?}", provider, verified);
        let verified = verified.unwrap();
        prop_assert_eq!(verified.secret, 0, "{}", provider);
        // The time it says was signed is the one that was, where one was.
        let signs_time = !matches!(provider, "github" | "shopify" | "twilio");
        prop_assert_eq!(verified.signed_at, signs_time.then_some(ts), "{}", provider);
        match p.identify(&req) {
            Ok(Identity::Event(identity)) => prop_assert_eq!(identity.id, id),
            other => prop_assert!(false, "{}: {:?}", provider, other),
        }
        prop_assert!(through(p.as_ref(), &req)?);
    }

    /// A request signed outside the window never verifies, where the
    /// provider signs a time; where it does not, the window is not its check.
    #[test]
    fn a_request_signed_outside_the_window_is_refused(
        provider in prop::sample::select(&["stripe", "standard-webhooks", "svix", "slack", "linear", "paddle", "hmac"][..]),
        id in "[A-Za-z0-9_:.é€-]{1,300}",
        payload in any::<String>(),
        beyond in (TOLERANCE + 1)..=(30 * 86_400),
        future in any::<bool>(),
    ) {
        let p = build(provider);
        let ts = if future { NOW + beyond } else { NOW - beyond };
        let req = signed(provider, &id, ts, &payload);
        let secrets = Secrets::parse(SECRET).unwrap();
        prop_assert_eq!(
            p.verify(&req, &context(&secrets)),
            Err(Rejection::TimestampOutsideWindow),
            "{} at {}", provider, ts
        );
    }

    /// A mutated request never verifies — unless the mutation leaves what is
    /// signed unchanged: a hex signature in the other case, or a Twilio form
    /// that decodes to the same parameters.
    #[test]
    fn a_mutated_request_never_verifies(
        provider in prop::sample::select(providers()),
        id in "[A-Za-z0-9_:.é€-]{1,300}",
        payload in any::<String>(),
        mutation in mutation(),
    ) {
        let p = build(provider);
        let req = signed(provider, &id, NOW, &payload);
        let header = signature_header(provider);
        let original = req.header(header).unwrap().to_string();
        let (mutated, benign) = match mutation {
            Mutation::Body(at, x) => {
                let body = flip(&req.body, at, x);
                let mutated = RawRequest::new(
                    req.url.clone(),
                    headers_of(&req, &ALL_HEADERS).into_iter().chain(headers_of(&req, &["x-ts", "x-delivery"])),
                    body,
                );
                let same_signed_content = provider == "twilio"
                    && signed_form(&mutated.body).is_some()
                    && signed_form(&mutated.body) == signed_form(&req.body);
                (mutated, same_signed_content)
            }
            Mutation::Signature(at, x) => {
                let value = String::from_utf8_lossy(&flip(original.as_bytes(), at, x)).into_owned();
                // Hex is case-insensitive; base64 is not.
                let hex = matches!(provider, "stripe" | "github" | "slack" | "linear" | "paddle" | "hmac");
                let benign = hex && value.eq_ignore_ascii_case(&original);
                (with_header(&req, header, value), benign)
            }
            Mutation::SignedHeader(which, at, x) => {
                let names = signed_headers(provider);
                prop_assume!(!names.is_empty());
                let name = names[which % names.len()];
                let value = req.header(name).unwrap().to_string();
                let flipped = String::from_utf8_lossy(&flip(value.as_bytes(), at, x)).into_owned();
                // Surrounding whitespace is not part of a header's value.
                let benign = flipped.trim() == value;
                (with_header(&req, name, flipped), benign)
            }
        };
        let verified = through(p.as_ref(), &mutated)?;
        prop_assert!(!verified || benign, "{} verified after {:?}", provider, mutation);
    }

    /// The parts of a signature header may come in any order, and signatures
    /// may repeat; a missing signature or timestamp part is never accepted,
    /// nor a second timestamp that differs.
    #[test]
    fn signature_parts_reordered_duplicated_or_dropped(
        provider in prop::sample::select(&["stripe", "paddle", "standard-webhooks", "svix"][..]),
        id in "[A-Za-z0-9_:.é€-]{1,300}",
        payload in any::<String>(),
        junk in "[A-Za-z0-9+/]{4,44}",
    ) {
        let p = build(provider);
        let req = signed(provider, &id, NOW, &payload);
        let header = signature_header(provider);
        let original = req.header(header).unwrap().to_string();
        let separator = match provider { "stripe" => ",", "paddle" => ";", _ => " " };
        let parts: Vec<&str> = original.split(separator).collect();
        let secrets = Secrets::parse(SECRET).unwrap();
        let verify = |value: String| p.verify(&with_header(&req, header, value), &context(&secrets)).is_ok();

        let mut reordered = parts.clone();
        reordered.reverse();
        prop_assert!(verify(reordered.join(separator)), "{} reordered", provider);
        let is_signature = |part: &&str| !part.starts_with("t=") && !part.starts_with("ts=");
        let mut doubled = parts.clone();
        doubled.extend(parts.iter().copied().filter(is_signature));
        prop_assert!(verify(doubled.join(separator)), "{} duplicated", provider);
        if let Some(time) = parts.iter().find(|part| !is_signature(part)) {
            let (name, _) = time.split_once('=').unwrap();
            let later = format!("{name}={}", NOW + 1);
            let mut two_times = parts.clone();
            two_times.push(&later);
            prop_assert!(!verify(two_times.join(separator)), "{} with a second timestamp", provider);
        }
        let other = match provider {
            "stripe" => format!("v1={}", hex::encode(junk.as_bytes())),
            "paddle" => format!("h1={}", hex::encode(junk.as_bytes())),
            _ => format!("v1,{junk}"),
        };
        let mut with_other = vec![other.as_str()];
        with_other.extend(parts.iter().copied());
        prop_assert!(verify(with_other.join(separator)), "{} with another signature first", provider);
        for dropped in 0..parts.len() {
            let mut fewer = parts.clone();
            fewer.remove(dropped);
            prop_assert!(!verify(fewer.join(separator)), "{} without part {}", provider, dropped);
        }
        prop_assert!(!verify(other), "{} with only someone else's signature", provider);
    }

    /// Arbitrary header maps and bodies: no panic anywhere, and (almost
    /// surely) no verification.
    #[test]
    fn arbitrary_requests_never_panic(
        provider in prop::sample::select(providers()),
        headers in prop::collection::vec(
            (prop::sample::select(&ALL_HEADERS[..]).prop_map(str::to_string).boxed()
                .prop_union(any::<String>().boxed()), any::<String>()),
            0..8,
        ),
        body in prop::collection::vec(any::<u8>(), 0..2048),
        url in prop_oneof![Just(URL.to_string()), any::<String>()],
    ) {
        let p = build(provider);
        let req = RawRequest::new(url, headers, body);
        prop_assert!(!through(p.as_ref(), &req)?, "{} verified an arbitrary request", provider);
    }

    /// `plan` of any body under any type answers with statements or a
    /// PlanError, whatever the JSON: no panic.
    #[test]
    fn plan_answers_for_any_body(
        provider in prop::sample::select(&["stripe", "github", "paddle"][..]),
        kind in prop_oneof![
            prop::sample::select(&[
                "checkout.session.completed", "checkout.session.async_payment_succeeded",
                "checkout.session.async_payment_failed", "payment_intent.succeeded",
                "customer.subscription.updated", "customer.subscription.deleted",
                "star.created", "star.deleted",
            ][..]).prop_map(str::to_string),
            any::<String>(),
        ],
        value in json(),
    ) {
        let body = value.to_string();
        let event = event(provider, "evt_1", &kind, &body);
        let _ = plan_with(EFFECTS, &event, 2);
    }
}

/// Arbitrary JSON, biased towards the shapes the effects read.
fn json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        let field = prop_oneof![
            prop::sample::select(
                &[
                    "id",
                    "created",
                    "data",
                    "object",
                    "payment_status",
                    "amount_total",
                    "currency",
                    "customer_details",
                    "email",
                    "payment_intent",
                    "status",
                    "customer",
                    "repository",
                    "full_name",
                    "sender",
                    "login",
                    "starred_at",
                ][..]
            )
            .prop_map(str::to_string),
            any::<String>(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((field, inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

#[test]
fn plan_refuses_a_body_nested_5000_deep() {
    let body = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    for kind in ["checkout.session.completed", "star.created"] {
        let provider = if kind.starts_with("star") {
            "github"
        } else {
            "stripe"
        };
        let event = event(provider, "evt_deep", kind, &body);
        assert!(plan_with(EFFECTS, &event, 2).is_err(), "{kind}");
    }
}
