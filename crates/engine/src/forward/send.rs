//! One attempt at a delivery: the body from its inbox, signed for the
//! destination, POSTed under the delivery's id, and one log line with its
//! status and latency — never the URL (it may carry credentials) or a key.

use std::borrow::Cow;

use serde::Serialize;
use worker::{web_sys, Env, Fetch, ResponseBody};

use super::destinations::Destination;
use super::{sign, Forward};
use crate::clock::now_ms;
use crate::http;
use crate::inbox::client;
use crate::log;
use crate::outbox::CallError;
use crate::settings::Settings;

/// The delivery an attempt is for, as its row names it.
pub struct Delivery<'a> {
    pub id: &'a str,
    pub source: &'a str,
    pub event_id: &'a str,
    pub kind: &'a str,
    pub destination: &'a str,
    pub attempt: i64,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The request went out: `status` is the answer's, `None` when there
    /// was none (a timeout, a refused connection); `error` a fixed phrase
    /// unless it was a 2xx.
    Made {
        status: Option<u16>,
        retry_after: Option<String>,
        latency_ms: i64,
        error: Option<String>,
    },
    /// The request could not be made, for a reason of ours, not the
    /// destination's (it does not count toward its breaker); `lasting`
    /// where trying again cannot help.
    NotMade { why: String, lasting: bool },
}

/// The attempt's log line. Field names are stable, like `delivery`'s.
#[derive(Serialize)]
struct AttemptLine<'a> {
    msg: &'static str,
    delivery_id: &'a str,
    destination: &'a str,
    key: String,
    attempt: i64,
    status: Option<u16>,
    latency_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// Makes one attempt; `destination` is `None` when it is no longer declared.
pub async fn attempt(
    env: &Env,
    settings: &Settings,
    destination: Option<&Destination>,
    delivery: &Delivery<'_>,
) -> Attempt {
    let attempt = match destination {
        Some(destination) => post(env, settings, destination, delivery).await,
        // Claims take declared destinations only; should one go meanwhile,
        // the delivery waits for it.
        None => Attempt::NotMade {
            why: "the destination is no longer declared in DESTINATIONS".into(),
            lasting: false,
        },
    };
    let (status, latency_ms, error) = match &attempt {
        Attempt::Made {
            status,
            latency_ms,
            error,
            ..
        } => (*status, Some(*latency_ms), error.as_deref()),
        Attempt::NotMade { why, .. } => (None, None, Some(why.as_str())),
    };
    let line = AttemptLine {
        msg: "forward_attempt",
        delivery_id: delivery.id,
        destination: delivery.destination,
        key: crate::event::dedupe_key(delivery.source, delivery.event_id),
        attempt: delivery.attempt,
        status,
        latency_ms,
        error,
    };
    if error.is_some() {
        log::warn(&line);
    } else {
        log::info(&line);
    }
    attempt
}

async fn post(
    env: &Env,
    settings: &Settings,
    destination: &Destination,
    delivery: &Delivery<'_>,
) -> Attempt {
    let not_made = |why: String, lasting| Attempt::NotMade { why, lasting };
    let keys = match settings.keys(destination) {
        Ok(keys) => keys,
        Err(e) => return not_made(e.0, false),
    };
    let (body, forward) = match client::body(env, delivery.source, delivery.event_id).await {
        Ok(Some(found)) => found,
        Ok(None) => {
            let why = "the event's inbox no longer holds its body (past RETENTION)";
            return not_made(why.into(), true);
        }
        Err(_) => return not_made("the event's inbox did not answer".into(), false),
    };
    let stored = Forward::read(Some(&forward)).headers;
    let timestamp = now_ms() / 1000;
    let signature = sign::signature(keys, delivery.id, timestamp, body.as_bytes());
    let timestamp = timestamp.to_string();
    let (kind, event_id) = (header_safe(delivery.kind), header_safe(delivery.event_id));
    let passed = stored
        .iter()
        .filter(|(name, _)| name == "content-type" || destination.headers.contains(name));
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    // Later entries win: a listed header cannot replace the ones below.
    headers.extend(passed.map(|(name, value)| (name.as_str(), value.as_str())));
    headers.extend([
        ("webhook-id", delivery.id),
        ("webhook-timestamp", timestamp.as_str()),
        ("webhook-signature", signature.as_str()),
        ("idempotency-key", delivery.id),
        ("x-webhook-source", delivery.source),
        ("x-webhook-event-type", &kind),
        ("x-webhook-event-id", &event_id),
    ]);
    let Ok(request) = http::post_unredirected(&destination.url, &body, &headers) else {
        return not_made(CallError::InvalidUrl.to_string(), true);
    };
    let started = now_ms();
    let signal = web_sys::AbortSignal::timeout_with_u32(destination.timeout_ms);
    let sent = Fetch::Request(request)
        .send_with_signal(&signal.clone().into())
        .await;
    let latency_ms = now_ms() - started;
    match sent {
        Ok(response) => {
            // The answer's body is not read: let its connection go now.
            if let ResponseBody::Stream(body) = response.body() {
                let _ = body.cancel();
            }
            let status = response.status_code();
            let retry_after = response.headers().get("retry-after").ok().flatten();
            let error =
                (!(200..300).contains(&status)).then(|| CallError::Answered(status).to_string());
            Attempt::Made {
                status: Some(status),
                retry_after,
                latency_ms,
                error,
            }
        }
        Err(_) => {
            let error = if signal.aborted() {
                CallError::TimedOut(destination.timeout_ms)
            } else {
                CallError::Unreachable
            };
            Attempt::Made {
                status: None,
                retry_after: None,
                latency_ms,
                error: Some(error.to_string()),
            }
        }
    }
}

/// `text` as a header value can carry it: anything but printable ASCII as `?`.
fn header_safe(text: &str) -> Cow<'_, str> {
    if text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(
            text.chars()
                .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_printable_ascii() {
        assert_eq!(header_safe("invoice.paid"), "invoice.paid");
        assert_eq!(header_safe("caf\u{e9}\nx"), "caf??x");
    }
}
