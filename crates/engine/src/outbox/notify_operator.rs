//! `notify_operator`: tell the operators that something needs them — an
//! event gave up, a side effect or a forwarded delivery is dead, a
//! destination's breaker opened or closed, or a source's refusals passed
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

use super::{post_json, Call, CallError, ChatMessage, Performed};

pub use super::alert::Alert;
use crate::config::{self, AlertSettings};
use crate::log::{self, Line};
use crate::settings::Settings;

/// The alert settings where an alert is due: a misconfiguration (which the
/// receiver refuses deliveries over, naming the variable) is logged here and
/// the defaults are used, so that the alert still goes out.
pub fn settings(settings: &Settings) -> AlertSettings {
    settings.alerts().cloned().unwrap_or_else(|e| {
        log::error(&Line::new("alert_misconfigured").error(e));
        AlertSettings {
            interval_ms: 15 * 60 * 1000,
            refusals_per_minute: 60,
        }
    })
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
        return Ok(Performed::Skipped(
            "ALERT_URL is not set: logged only".into(),
        ));
    };
    post_json(&url, &chat_body(payload)?, call, None).await?;
    Ok(Performed::Sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::d1::Value;
    use crate::outbox::alert::tests::SETTINGS;

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
}
