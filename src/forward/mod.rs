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
pub mod consumer;
pub mod destinations;
pub mod operate;
mod outcome;
pub mod relay;
pub mod report;
mod send;
pub mod sign;

use worker::Env;

use self::destinations::{Bounds, Destination};
use crate::config::{ConfigError, FORWARD_BINDING};
use crate::d1::Statement;
use crate::event::VerifiedEvent;
use crate::names::named_enum;
use crate::{outbox, sources};

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

/// The rows of an event's deliveries, one statement whatever their number
/// (`?5`: a JSON array of `[id, destination]`).
const INSERT_ROWS: &str = "INSERT INTO forwards \
     (delivery_id, source, event_id, event_type, destination, next_attempt_at, created_at, \
      budget_from, updated_at) \
     SELECT json_extract(value, '$[0]'), ?1, ?2, ?3, json_extract(value, '$[1]'), ?4, ?4, ?4, ?4 \
     FROM json_each(?5) WHERE true ON CONFLICT (delivery_id) DO NOTHING";

/// The statement writing an event's deliveries to `destinations`, for its
/// effect batch, and their ids; `None` when it goes nowhere.
pub fn insert(
    event: &VerifiedEvent,
    destinations: &[String],
    now: i64,
) -> Option<(Statement, Vec<String>)> {
    if destinations.is_empty() {
        return None;
    }
    let ids: Vec<String> = destinations
        .iter()
        .map(|destination| delivery_id(&event.source, &event.id, destination))
        .collect();
    let pairs: Vec<[&str; 2]> = ids
        .iter()
        .zip(destinations)
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

/// The names of the destinations `event`'s source forwards it to, by its
/// type: what the inbox writes rows for.
#[inline(never)]
pub fn destinations_for(env: &Env, event: &VerifiedEvent) -> Result<Vec<String>, ConfigError> {
    let Some(source) = sources::lookup(env, &event.source)? else {
        return Ok(Vec::new());
    };
    let bounds = Bounds::from_env(env)?;
    let routes = destinations::routes(env, &bounds, &event.source, &source.forward, &event.kind)?;
    Ok(routes.into_iter().map(|d| d.name).collect())
}

/// The request headers `routes` are sent, as [`VerifiedEvent::headers`]:
/// `Content-Type` and those a destination lists, read by `header`. `None`
/// where there is no route. A value that is not printable ASCII is left
/// out: it could not be carried as a header again.
#[inline(never)]
pub fn headers_to_send<'a>(
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
    let printable = |v: &&str| v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
    let pairs: Vec<[&str; 2]> = names
        .into_iter()
        .filter_map(|name| header(name).filter(printable).map(|value| [name, value]))
        .collect();
    // Strings only: serialization cannot fail.
    Some(serde_json::to_string(&pairs).expect("strings serialize"))
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

    fn route(headers: &[&str]) -> Destination {
        Destination {
            name: "d".into(),
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
    fn the_content_type_and_listed_headers_are_kept_once_each() {
        let request = [
            ("content-type", "application/json"),
            ("x-request-id", "r1"),
            ("x-provider-signature", "t=1,v1=ab"),
            ("x-odd", "caf\u{e9}"),
        ];
        let header = |name: &str| request.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(headers_to_send(&[], header), None);
        let routes = [
            route(&["x-request-id", "x-odd"]),
            route(&["x-request-id", "x-missing"]),
        ];
        assert_eq!(
            headers_to_send(&routes, header).unwrap(),
            r#"[["content-type","application/json"],["x-request-id","r1"]]"#
        );
    }

    #[test]
    fn an_event_s_deliveries_are_one_statement_with_stable_ids() {
        let event = crate::effects::tests::event("example", "invoice.paid", "{}");
        assert!(insert(&event, &[], 5).is_none());
        let (statement, ids) = insert(&event, &["a".into(), "b".into()], 5).unwrap();
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
