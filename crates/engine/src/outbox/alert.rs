//! What an operator alert reports, and the row that sends it: written in
//! the same transaction as what it reports, and only where that holds
//! (see `notify_operator`).

use super::{idempotency_key, Action, ChatMessage};
use crate::clock;
use crate::config::AlertSettings;
use crate::d1::Statement;

/// Where an alert sends the operator to act.
#[cfg(feature = "dashboard")]
const ACT_IN: &str = "the dashboard (/admin)";
#[cfg(all(feature = "admin", not(feature = "dashboard")))]
const ACT_IN: &str = "the admin API (/admin/api)";
#[cfg(not(any(feature = "admin", feature = "dashboard")))]
const ACT_IN: &str = "the admin API (a build with the admin feature)";

/// What an alert reports.
pub enum Alert<'a> {
    /// An event spent its retry budget and is listed as failed.
    EventFailed {
        source: &'a str,
        event_id: &'a str,
        kind: &'a str,
        error: &'a str,
    },
    /// A side effect spent its attempts. `key` is its row's key.
    SideEffectDead {
        source: &'a str,
        event_id: &'a str,
        action: &'a str,
        key: &'a str,
        attempts: i64,
        error: &'a str,
    },
    /// `source`'s refusals in `minute` (since the epoch) reached the
    /// threshold.
    Refusals { source: &'a str, minute: i64 },
    /// A forwarded event's delivery (`id`) is dead (see `forward`).
    ForwardDead {
        source: &'a str,
        event_id: &'a str,
        destination: &'a str,
        id: &'a str,
        attempts: i64,
        error: &'a str,
    },
    /// A destination's breaker opened or closed, or a 410 disabled it:
    /// `state` is what it is now, as of `since` (ms).
    Destination {
        name: &'a str,
        state: &'static str,
        since: i64,
        why: &'a str,
    },
    /// Postgres only: the relay gave up handing `event_id`'s row (`kind`,
    /// `key`) off to D1 after `tries` failures, and no longer claims it.
    #[cfg(feature = "postgres")]
    HandOffStuck {
        source: &'a str,
        event_id: &'a str,
        kind: &'a str,
        key: &'a str,
        tries: i64,
    },
}

/// Writes the alert's row only where the event is neither applied nor
/// already listed as failed: as the listing it rides with would.
const INSERT_IF_NEWLY_FAILED: &str = "INSERT INTO outbox \
     (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) \
     SELECT ?1, ?2, ?3, 'notify_operator', ?4, ?5, ?5, ?5 \
     WHERE NOT EXISTS (SELECT 1 FROM processed_events WHERE source = ?2 AND event_id = ?3) \
       AND NOT EXISTS (SELECT 1 FROM failed_events WHERE source = ?2 AND event_id = ?3 \
         AND dismissed_at IS NULL) \
     ON CONFLICT (idempotency_key) DO NOTHING";

/// Writes the alert's row only where this claim made the side effect's row
/// (`?6`) dead: after the update, in the same transaction, which left its
/// attempt (`?7`) and its time (`?5`, the alert's own). A stalled claim
/// that lost the row to another run writes nothing.
const INSERT_IF_DEAD: &str = "INSERT INTO outbox \
     (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) \
     SELECT ?1, ?2, ?3, 'notify_operator', ?4, ?5, ?5, ?5 \
     WHERE EXISTS (SELECT 1 FROM outbox WHERE idempotency_key = ?6 AND status = 'dead' \
       AND attempts = ?7 AND updated_at = ?5) \
     ON CONFLICT (idempotency_key) DO NOTHING";

/// Writes the alert's row only where the minute's (`?6`) refusals for the
/// source reached the threshold (`?7`).
const INSERT_IF_REFUSALS: &str = "INSERT INTO outbox \
     (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) \
     SELECT ?1, ?2, ?3, 'notify_operator', ?4, ?5, ?5, ?5 \
     WHERE EXISTS (SELECT 1 FROM delivery_trend WHERE minute = ?6 AND source = ?2 \
       AND outcome = 'refused' AND value >= ?7) \
     ON CONFLICT (idempotency_key) DO NOTHING";

/// Writes the alert's row only where this claim made the delivery (`?6`)
/// dead, at its attempt (`?7`) and time (`?5`): as [`INSERT_IF_DEAD`].
const INSERT_IF_FORWARD_DEAD: &str = "INSERT INTO outbox \
     (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) \
     SELECT ?1, ?2, ?3, 'notify_operator', ?4, ?5, ?5, ?5 \
     WHERE EXISTS (SELECT 1 FROM forwards WHERE delivery_id = ?6 AND status = 'dead' \
       AND attempts = ?7 AND updated_at = ?5) \
     ON CONFLICT (idempotency_key) DO NOTHING";

/// Writes the alert's row only where the destination (`?2`) is in the
/// state `?6` since `?7`: the change this batch made, not an earlier one.
const INSERT_IF_DESTINATION: &str = "INSERT INTO outbox \
     (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) \
     SELECT ?1, ?2, ?3, 'notify_operator', ?4, ?5, ?5, ?5 \
     WHERE EXISTS (SELECT 1 FROM destinations WHERE name = ?2 AND state = ?6 \
       AND state_since = ?7) \
     ON CONFLICT (idempotency_key) DO NOTHING";

/// Writes the alert's row: what it reports (a row the relay gave up on)
/// lives in Postgres, beyond this D1 batch's reach. The relay writes it
/// before its transaction counts the last try, so that it goes at least once.
#[cfg(feature = "postgres")]
const INSERT_ALWAYS: &str = "INSERT INTO outbox \
     (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) \
     VALUES (?1, ?2, ?3, 'notify_operator', ?4, ?5, ?5, ?5) \
     ON CONFLICT (idempotency_key) DO NOTHING";

/// Errors quoted in an alert are cut here: a chat line, not a report.
const ERROR_MAX_CHARS: usize = 300;

impl Alert<'_> {
    /// The statement writing the alert's row, conditional on what it
    /// reports still holding, and the row's key. `now` in ms.
    pub fn row(&self, settings: &AlertSettings, now: i64) -> (Statement, String) {
        let bucket = now.div_euclid(settings.interval_ms);
        let every = clock::duration_text(settings.interval_ms);
        let (name, source, event_id, sql, text, extra): (_, _, _, _, _, Vec<_>) = match *self {
            Alert::EventFailed {
                source,
                event_id,
                kind,
                error,
            } => (
                "event_failed",
                source,
                event_id,
                INSERT_IF_NEWLY_FAILED,
                format!(
                    "{source}: event {event_id} ({kind}) gave up: {}. Replay or dismiss it from \
                     {ACT_IN}. Further failures of {source} within {every} are listed there, \
                     not alerted.",
                    cut(error)
                ),
                Vec::new(),
            ),
            Alert::SideEffectDead {
                source,
                event_id,
                action,
                key,
                attempts,
                error,
            } => (
                "side_effect_dead",
                source,
                event_id,
                INSERT_IF_DEAD,
                format!(
                    "{source}: side effect {action} of event {event_id} is dead after {attempts} \
                     attempt{}: {}. Requeue it from {ACT_IN}. Further dead side effects of \
                     {source} within {every} are listed there, not alerted.",
                    if attempts == 1 { "" } else { "s" },
                    cut(error)
                ),
                vec![key.into(), attempts.into()],
            ),
            Alert::Refusals { source, minute } => (
                "refusals",
                source,
                "(refusals)",
                INSERT_IF_REFUSALS,
                format!(
                    "{source}: {} or more deliveries refused in the minute from {} UTC \
                     (ALERT_REFUSALS_PER_MINUTE). A secret rotated at the sender but not here, \
                     a misconfiguration or an outage: the `delivery` log lines say why each \
                     was refused.",
                    settings.refusals_per_minute,
                    clock::utc_minute(minute)
                ),
                vec![minute.into(), settings.refusals_per_minute.into()],
            ),
            Alert::ForwardDead {
                source,
                event_id,
                destination,
                id,
                attempts,
                error,
            } => (
                "forward_dead",
                source,
                event_id,
                INSERT_IF_FORWARD_DEAD,
                format!(
                    "{source}: event {event_id} could not be forwarded to {destination} after \
                     {attempts} attempt{}: {}. Redeliver it from {ACT_IN}. Further dead \
                     deliveries of {source} within {every} are listed there, not alerted.",
                    if attempts == 1 { "" } else { "s" },
                    cut(error)
                ),
                vec![id.into(), attempts.into()],
            ),
            Alert::Destination {
                name,
                state,
                since,
                why,
            } => (
                match state {
                    "open" => "destination_open",
                    "closed" => "destination_closed",
                    _ => "destination_disabled",
                },
                name,
                "(destination)",
                INSERT_IF_DESTINATION,
                match state {
                    "open" => format!(
                        "destination {name} keeps failing ({}): its breaker is open. Its \
                         deliveries wait without spending attempts, a probe goes out now and \
                         then, and they drain once it answers.",
                        cut(why)
                    ),
                    "closed" => format!(
                        "destination {name} answers again: its breaker closed, and its waiting \
                         deliveries are draining, oldest first."
                    ),
                    _ => format!(
                        "destination {name} answered 410 Gone: it is disabled, and its \
                         deliveries wait. Re-enable it from {ACT_IN} once it takes them again."
                    ),
                },
                vec![state.into(), since.into()],
            ),
            #[cfg(feature = "postgres")]
            Alert::HandOffStuck {
                source,
                event_id,
                kind,
                key,
                tries,
            } => (
                "handoff_stuck",
                source,
                event_id,
                INSERT_ALWAYS,
                format!(
                    "{source}: the {kind} row {key} of event {event_id} could not be handed off \
                     to D1 in {tries} tries; the relay no longer tries it. The `handoff_refused` \
                     (D1 refused it) or `handoff_unreadable` log lines say why. Once mended, \
                     retry the stuck rows from {ACT_IN}. Further stuck rows of {source} within \
                     {every} are listed there, not alerted."
                ),
                Vec::new(),
            ),
        };
        let key = idempotency_key(
            "alert",
            &format!("{name}\n{source}\n{bucket}"),
            Action::NotifyOperator.name(),
        );
        // A struct of one string: serialization cannot fail.
        let payload = serde_json::to_string(&ChatMessage { text }).expect("payload serializes");
        let mut params = vec![
            key.as_str().into(),
            source.into(),
            event_id.into(),
            payload.into(),
            now.into(),
        ];
        params.extend(extra);
        (Statement::new(sql, params), key)
    }
}

/// `error`, at most [`ERROR_MAX_CHARS`] characters of it.
fn cut(error: &str) -> String {
    match error.char_indices().nth(ERROR_MAX_CHARS) {
        Some((end, _)) => format!("{}…", &error[..end]),
        None => error.to_string(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::d1::Value;

    pub(in crate::outbox) const SETTINGS: AlertSettings = AlertSettings {
        interval_ms: 15 * 60 * 1000,
        refusals_per_minute: 60,
    };

    fn failed(event_id: &str) -> Alert<'_> {
        Alert::EventFailed {
            source: "beta",
            event_id,
            kind: "item.created",
            error: "D1 is down",
        }
    }

    #[test]
    fn one_key_per_kind_source_and_bucket_not_per_event() {
        let at = 1_700_000_100_000; // 100 s into a 15-minute bucket
        let (_, first) = failed("evt_1").row(&SETTINGS, at);
        let (_, same_bucket) = failed("evt_2").row(&SETTINGS, at + 14 * 60 * 1000);
        assert_eq!(first, same_bucket, "a storm of failures: one alert");
        let (_, next_bucket) = failed("evt_3").row(&SETTINGS, at + 15 * 60 * 1000);
        assert_ne!(first, next_bucket);
        let dead = Alert::SideEffectDead {
            source: "beta",
            event_id: "evt_1",
            action: "send_email",
            key: "k",
            attempts: 5,
            error: "target answered 500",
        };
        assert_ne!(dead.row(&SETTINGS, at).1, first, "another kind");
        let alpha = Alert::EventFailed {
            source: "alpha",
            event_id: "evt_1",
            kind: "item.created",
            error: "D1 is down",
        };
        assert_ne!(alpha.row(&SETTINGS, at).1, first, "another source");
    }

    #[test]
    fn the_row_says_what_happened_and_is_conditional_on_it() {
        let (statement, key) = failed("evt_1").row(&SETTINGS, 1_700_000_000_000);
        assert!(statement
            .sql
            .contains("NOT EXISTS (SELECT 1 FROM processed_events"));
        assert_eq!(statement.params[0], Value::Text(key));
        let Value::Text(payload) = &statement.params[3] else {
            panic!("payload is text");
        };
        assert_eq!(
            *payload,
            format!(
                r#"{{"text":"beta: event evt_1 (item.created) gave up: D1 is down. Replay or dismiss it from {ACT_IN}. Further failures of beta within 15m are listed there, not alerted."}}"#
            )
        );
        let refusals = Alert::Refusals {
            source: "beta",
            minute: 1_700_000_000_000 / 60_000,
        };
        let (statement, _) = refusals.row(&SETTINGS, 1_700_000_000_000);
        assert!(statement
            .sql
            .contains("outcome = 'refused' AND value >= ?7"));
        assert_eq!(statement.params[6], Value::Int(60));
        let Value::Text(payload) = &statement.params[3] else {
            panic!("payload is text");
        };
        assert!(
            payload
                .contains("60 or more deliveries refused in the minute from 2023-11-14 22:13 UTC"),
            "{payload}"
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_stuck_hand_off_row_is_alerted_once_per_source_and_bucket_whatever_the_row() {
        let stuck = |key| Alert::HandOffStuck {
            source: "stripe",
            event_id: "evt_1",
            kind: "outbox",
            key,
            tries: 10,
        };
        let at = 1_700_000_100_000;
        let (statement, first) = stuck("k1").row(&SETTINGS, at);
        assert_eq!(first, stuck("k2").row(&SETTINGS, at + 60_000).1);
        assert!(
            statement.sql.contains("VALUES (?1"),
            "what it reports is in Postgres"
        );
        let Value::Text(payload) = &statement.params[3] else {
            panic!("payload is text");
        };
        assert!(
            payload.contains(
                "the outbox row k1 of event evt_1 could not be handed off to D1 in 10 tries"
            ),
            "{payload}"
        );
    }

    #[test]
    fn a_long_error_is_cut() {
        assert_eq!(cut("short"), "short");
        let long = "é".repeat(400);
        assert_eq!(cut(&long).chars().count(), ERROR_MAX_CHARS + 1);
    }
}
