//! Forwarding: each verified event delivered to your own HTTP endpoints, once
//! per destination, with no code — `[vars.DESTINATIONS]` says where, and a
//! source's `forward` which (see [`destinations`]).
//!
//! A delivery is written as a `forwards` row in the event's effect batch,
//! beside its ledger row, so it exists exactly when the event was handled.
//! Its id, derived from source, event id and destination, is the
//! `webhook-id` and `Idempotency-Key` the destination sees on every attempt,
//! replay and redelivery: the destination dedupes on it, and verifies each
//! request with any Standard Webhooks library ([`sign`]).
//!
//! The row carries a reference, not the body: a queue message holds 128 KB,
//! and the event's inbox keeps the body, exactly as signed, for `RETENTION`
//! (longer than any destination's `max_age`). The [`consumer`] claims and
//! completes a whole queue batch per statement; each destination's
//! [`breaker`] holds its deliveries while it is down, without spending
//! their attempts; the cron [`relay`] re-sends what a lost message left
//! behind and sends the open breakers' probes.

pub mod breaker;
mod claim;
pub mod consumer;
pub mod destinations;
#[cfg(any(feature = "admin", feature = "dashboard"))]
pub mod operate;
mod outcome;
pub mod relay;
#[cfg(any(feature = "admin", feature = "dashboard"))]
pub mod report;
mod send;
pub mod sign;

use worker::Env;

use serde::{Deserialize, Serialize};

use self::destinations::Destination;
use crate::config::FORWARD_BINDING;
use crate::d1::Statement;
use crate::event::VerifiedEvent;
use crate::names::named_enum;
use crate::outbox;

named_enum! {
    /// The states of a `forwards` row.
    pub enum ForwardStatus {
        /// Due at `next_attempt_at`, or held by its destination's breaker.
        Pending = "pending",
        /// Claimed by a consumer run until `lease_until`.
        Sending = "sending",
        Delivered = "delivered",
        /// Refused, out of attempts or out of time; an operator may redeliver it.
        Dead = "dead",
    }
}

/// A delivery's id: `sha256(source \n event id \n "forward " + destination)`,
/// hex — stable across attempts, replays, crashes and redeliveries, and
/// distinct per destination.
pub fn delivery_id(source: &str, event_id: &str, destination: &str) -> String {
    outbox::idempotency_key(source, event_id, &format!("forward {destination}"))
}

/// Where an event is forwarded, fixed when it is received and kept with it
/// in its inbox ([`VerifiedEvent::forward`]): a retry of its effect writes
/// the same deliveries whatever the configuration says by then.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forward {
    /// The destinations, by name.
    pub to: Vec<String>,
    /// The request headers they may be sent: `Content-Type`, and those a
    /// destination lists (each gets only its own).
    pub headers: Vec<(String, String)>,
}

/// The longest header value carried, and the most header bytes in all: a
/// handoff is a URL, and no provider sends more worth passing on.
const HEADER_MAX_BYTES: usize = 2048;
const HEADERS_MAX_BYTES: usize = 8192;

impl Forward {
    /// The forward of an event to `routes`, its headers read by `header`;
    /// `None` where there is no route. A value that is not printable ASCII,
    /// or is too long, is left out: it could not be carried again.
    #[inline(never)]
    pub fn to<'a>(
        routes: &[Destination],
        header: impl Fn(&str) -> Option<&'a str>,
    ) -> Option<String> {
        if routes.is_empty() {
            return None;
        }
        let mut names: Vec<&str> = vec!["content-type"];
        for name in routes.iter().flat_map(|d| &d.headers) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        let carried = |v: &&str| {
            v.len() <= HEADER_MAX_BYTES
                && v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        };
        let mut room = HEADERS_MAX_BYTES;
        let mut headers = Vec::new();
        for name in names {
            let Some(value) = header(name).filter(carried) else {
                continue;
            };
            let Some(left) = room.checked_sub(name.len() + value.len()) else {
                break;
            };
            room = left;
            headers.push((name.to_string(), value.to_string()));
        }
        let forward = Forward {
            to: routes.iter().map(|d| d.name.clone()).collect(),
            headers,
        };
        // Strings only: serialization cannot fail.
        Some(serde_json::to_string(&forward).expect("strings serialize"))
    }

    /// Reads one back; an unreadable one (an older release's) is none.
    pub fn read(json: Option<&str>) -> Forward {
        json.and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default()
    }
}

/// The rows of an event's deliveries, one statement whatever their number
/// (`?5`: a JSON array of `[id, destination]`).
pub(crate) const INSERT_ROWS: &str = "INSERT INTO forwards \
     (delivery_id, source, event_id, event_type, destination, next_attempt_at, created_at, \
      budget_from, updated_at) \
     SELECT json_extract(value, '$[0]'), ?1, ?2, ?3, json_extract(value, '$[1]'), ?4, ?4, ?4, ?4 \
     FROM json_each(?5) WHERE true ON CONFLICT (delivery_id) DO NOTHING";

/// The statement writing `event`'s deliveries, for its effect batch, and
/// their ids; `None` when it goes nowhere.
pub fn insert(event: &VerifiedEvent, now: i64) -> Option<(Statement, Vec<String>)> {
    let to = Forward::read(event.forward.as_deref()).to;
    if to.is_empty() {
        return None;
    }
    let ids: Vec<String> = to
        .iter()
        .map(|destination| delivery_id(&event.source, &event.id, destination))
        .collect();
    let pairs: Vec<[&str; 2]> = ids
        .iter()
        .zip(&to)
        .map(|(id, destination)| [id.as_str(), destination.as_str()])
        .collect();
    // Strings only: serialization cannot fail.
    let pairs = serde_json::to_string(&pairs).expect("strings serialize");
    let statement = Statement::new(
        INSERT_ROWS,
        vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            event.kind.as_str().into(),
            now.into(),
            pairs.into(),
        ],
    );
    Some((statement, ids))
}

/// Deliveries sent this many a second when a backlog is let go (a breaker
/// closes, an operator resumes, the relay re-sends): a destination that has
/// just come back is not met with its whole backlog at once.
const PACE_PER_SEC: usize = 50;

/// `ids`, oldest first, each with its delay at `PACE_PER_SEC`.
pub fn paced(ids: Vec<String>) -> Vec<(String, u32)> {
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| (id, u32::try_from(i / PACE_PER_SEC).unwrap_or(u32::MAX)))
        .collect()
}

/// Sends delivery ids to the forward queue, each after its delay (seconds).
/// A failure loses nothing: the rows are committed, and the relay sends
/// them after its grace period.
pub async fn enqueue(env: &Env, ids: &[(String, u32)]) -> worker::Result<()> {
    outbox::send_jobs(env, FORWARD_BINDING, ids, None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, headers: &[&str]) -> Destination {
        Destination {
            name: name.into(),
            url: "https://x".into(),
            secret_var: "S".into(),
            events: None,
            timeout_ms: 1,
            max_attempts: 1,
            max_age_ms: 1,
            headers: headers.iter().map(|h| h.to_string()).collect(),
        }
    }

    #[test]
    fn a_forward_names_its_routes_and_keeps_their_headers_once_each() {
        let long = "x".repeat(HEADER_MAX_BYTES + 1);
        let request = [
            ("content-type", "application/json"),
            ("x-request-id", "r1"),
            ("x-provider-signature", "t=1,v1=ab"),
            ("x-odd", "caf\u{e9}"),
            ("x-long", long.as_str()),
        ];
        let header = |name: &str| request.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(Forward::to(&[], header), None);
        let routes = [
            route("a", &["x-request-id", "x-odd", "x-long"]),
            route("b", &["x-request-id", "x-missing"]),
        ];
        let json = Forward::to(&routes, header).unwrap();
        assert_eq!(
            json,
            r#"{"to":["a","b"],"headers":[["content-type","application/json"],["x-request-id","r1"]]}"#
        );
        assert_eq!(Forward::read(Some(&json)).to, ["a", "b"]);
        assert_eq!(Forward::read(None), Forward::default());
        assert_eq!(Forward::read(Some("[1]")), Forward::default());
    }

    #[test]
    fn an_event_s_deliveries_are_one_statement_with_stable_ids() {
        let mut event = crate::effects::tests::event("example", "invoice.paid", "{}");
        assert!(insert(&event, 5).is_none());
        event.forward = Some(r#"{"to":["a","b"],"headers":[]}"#.into());
        let (statement, ids) = insert(&event, 5).unwrap();
        assert_eq!(
            ids,
            [
                delivery_id("example", "evt_1", "a"),
                delivery_id("example", "evt_1", "b")
            ]
        );
        assert_ne!(ids[0], ids[1]);
        assert_eq!(
            ids[0],
            outbox::idempotency_key("example", "evt_1", "forward a")
        );
        assert_eq!(statement.sql, INSERT_ROWS);
        let pairs = format!(r#"[["{}","a"],["{}","b"]]"#, ids[0], ids[1]);
        assert_eq!(statement.params[4], pairs.as_str().into());
    }
}
