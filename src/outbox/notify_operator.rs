//! `notify_operator`: tell the operators that something needs them — an
//! event gave up, a side effect is dead, or a source's refusals passed
//! `ALERT_REFUSALS_PER_MINUTE` in a minute (a rotated secret not yet
//! deployed) — through a chat incoming webhook: `POST {ALERT_URL}` with
//! `{"text": …}`. With `ALERT_URL` unset an alert is only logged, as
//! a `warn` line `operator_alert`.
//!
//! An alert is an outbox row like any side effect, written in the same D1
//! transaction as what it reports (the failed listing, the dead row, the
//! refusal count), so it exists exactly when that does, and is sent at
//! least once. Its idempotency key is derived from its kind, its source and
//! its time bucket (`ALERT_INTERVAL`, 15 minutes by default), never from
//! the event: the first failure of a bucket writes the row and every other
//! finds it there (`ON CONFLICT DO NOTHING`), so a storm of failures sends
//! one message per bucket, not one per event. An alert that itself goes
//! dead is logged, never alerted (no loop).

use super::{idempotency_key, post_json, Action, Call, CallError, ChatMessage, Performed};
use worker::Env;

use crate::clock;
use crate::config::{self, AlertSettings};
use crate::d1::Statement;
use crate::log::{self, Line};

/// The alert settings where an alert is due: a misconfiguration (which the
/// receiver refuses deliveries over, naming the variable) is logged here and
/// the defaults are used, so that the alert still goes out.
pub fn settings(env: &Env) -> AlertSettings {
    AlertSettings::from_env(env).unwrap_or_else(|e| {
        log::error(&Line::new("alert_misconfigured").error(e));
        AlertSettings {
            interval_ms: 15 * 60 * 1000,
            refusals_per_minute: 60,
        }
    })
}

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

/// The body posted for a stored payload: its text as a chat webhook's
/// `text` field reads it literally — `&`, `<` and `>` escaped, so that an event id or an
/// error cannot mention `<!channel>` or hide a link. (Stored unescaped: the
/// dashboard escapes for HTML, the log line is JSON.)
fn chat_body(payload: &str) -> Result<String, CallError> {
    let message: ChatMessage = serde_json::from_str(payload).map_err(|_| CallError::Unreadable)?;
    let text = message
        .text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    // A struct of one string: serialization cannot fail.
    Ok(serde_json::to_string(&ChatMessage { text }).expect("payload serializes"))
}

/// `error`, at most [`ERROR_MAX_CHARS`] characters of it.
fn cut(error: &str) -> String {
    match error.char_indices().nth(ERROR_MAX_CHARS) {
        Some((end, _)) => format!("{}…", &error[..end]),
        None => error.to_string(),
    }
}

/// Posts the alert to `ALERT_URL`, or, unset, logs it. The URL is a secret
/// (a chat webhook's carries a token): it never appears in an error or a log.
pub async fn perform(payload: &str, call: &Call<'_>) -> Result<Performed, CallError> {
    let Some(url) = config::optional(call.env, "ALERT_URL") else {
        let text = serde_json::from_str::<ChatMessage>(payload)
            .map_or_else(|_| payload.into(), |m| m.text);
        log::warn(
            &Line::new("operator_alert")
                .idempotency_key(call.key)
                .detail(text),
        );
        return Ok(Performed::Skipped("ALERT_URL is not set: logged only"));
    };
    post_json(&url, &chat_body(payload)?, call, None).await?;
    Ok(Performed::Sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::d1::Value;

    const SETTINGS: AlertSettings = AlertSettings {
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

    #[test]
    fn what_the_sender_controls_cannot_ping_a_channel() {
        let alert = Alert::EventFailed {
            source: "beta",
            event_id: "<!channel>",
            kind: "a&b",
            error: "<https://evil.example|click>",
        };
        let (statement, _) = alert.row(&SETTINGS, 0);
        let Value::Text(payload) = &statement.params[3] else {
            panic!("payload is text");
        };
        assert!(
            payload.contains("event <!channel> (a&b) gave up"),
            "stored as it is: {payload}"
        );
        let posted = chat_body(payload).unwrap();
        assert!(
            posted.contains(
                "event &lt;!channel&gt; (a&amp;b) gave up: &lt;https://evil.example|click&gt;."
            ),
            "{posted}"
        );
        assert!(!posted.contains('<') && !posted.contains('>'));
        assert!(chat_body("not json").is_err());
    }

    #[test]
    fn a_long_error_is_cut() {
        assert_eq!(cut("short"), "short");
        let long = "é".repeat(400);
        assert_eq!(cut(&long).chars().count(), ERROR_MAX_CHARS + 1);
    }
}
