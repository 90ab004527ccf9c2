//! The dashboard's pages: the overview (counters, recent and failed events,
//! dead side effects) and one page per event (its deliveries, effect and
//! side effects, and the actions on a failed one).

use worker::{Env, Response, Result};

use super::encode;
use super::html::{
    self, action_button, bad, code, escape, event_path, notice_html, num, page, table, td, time,
    LOGOUT,
};
use super::queries::{self, EventFilter, Listing};
use super::{forwarding, summary, trend};
use crate::clock::now_ms;
use crate::inbox::state::EventState;
use crate::inbox::store::LoggedDelivery;
use crate::outbox::{Action, OutboxStatus};
use crate::settings::Settings;

/// Replay and Dismiss for a failed event.
pub(super) fn failed_actions(source: &str, id: &str, forms: &str) -> String {
    let path = event_path(source, id);
    action_button(&format!("{path}/replay"), "Replay", forms)
        + &action_button(&format!("{path}/dismiss"), "Dismiss", forms)
}

/// Requeue for a dead side effect.
fn requeue_button(key: &str, forms: &str) -> String {
    action_button(
        &format!("/admin/outbox/{}/requeue", encode(key)),
        "Requeue",
        forms,
    )
}

pub(super) fn event_link(source: &str, id: &str) -> String {
    td(format!(
        r#"<a href="{}"><code>{}</code></a>"#,
        escape(&event_path(source, id)),
        escape(id)
    ))
}

/// Listed events as table rows: when, source, event, type, and how it
/// stands (processed, or the failure's error).
pub(super) fn event_rows(events: &[queries::ListedEvent]) -> Vec<Vec<String>> {
    events
        .iter()
        .map(|e| {
            let (at, status) = match e.status {
                Listing::Processed => (
                    e.processed_at,
                    td(r#"<span class="ok">processed</span>"#.into()),
                ),
                Listing::Failed => (e.failed_at, bad(e.last_error.as_deref())),
            };
            vec![
                td(time(at)),
                code(&e.source),
                event_link(&e.source, &e.event_id),
                td(escape(&e.kind)),
                status,
            ]
        })
        .collect()
}

/// The overview; `forms` is the session's form token, `notice` the outcome
/// of the action just taken.
pub async fn overview(
    env: &Env,
    settings: &Settings,
    forms: &str,
    notice: Option<&str>,
) -> Result<Response> {
    #[cfg(feature = "postgres")]
    let handoff = super::handoff::section(
        &super::handoff::read(env, settings, 25).await,
        forms,
        now_ms(),
    );
    #[cfg(not(feature = "postgres"))]
    let handoff = {
        let _ = settings;
        String::new()
    };
    let stats = queries::stats(env).await?.decode()?;
    let all = EventFilter::default();
    let processed = queries::events(env, Listing::Processed, &all, 25)
        .await?
        .decode()?;
    let failed = queries::events(env, Listing::Failed, &all, 25)
        .await?
        .decode()?;
    let dead = queries::outbox_rows(env, OutboxStatus::Dead, 25)
        .await?
        .decode()?;
    let alerts = queries::alerts(env, 10).await?.decode()?;
    let now_minute = now_ms().div_euclid(60_000);
    let trends = trend::build(
        &queries::trend(env, now_minute).await?.decode()?,
        now_minute,
    );

    let counters: Vec<Vec<String>> = summary::per_source(&stats)
        .iter()
        .map(|t| {
            vec![
                code(&t.source),
                num(t.received),
                num(t.processed),
                num(t.duplicates),
                num(t.rejected),
                num(t.in_ledger),
                num(t.failed),
                num(t.sent),
                num(t.dead),
            ]
        })
        .collect();
    let recent = event_rows(&processed);
    let failures: Vec<Vec<String>> = event_rows(&failed)
        .into_iter()
        .zip(&failed)
        .map(|(mut row, e)| {
            row.push(td(failed_actions(&e.source, &e.event_id, forms)));
            row
        })
        .collect();
    let dead_rows: Vec<Vec<String>> = dead
        .iter()
        .map(|r| {
            let source = r.source.as_deref().unwrap_or_default();
            // An alert is about a source, not one event's effect.
            let about = if r.action == Action::NotifyOperator.name() {
                td(format!("alert about <code>{}</code>", escape(source)))
            } else {
                event_link(source, r.event_id.as_deref().unwrap_or_default())
            };
            vec![
                td(time(Some(r.updated_at))),
                about,
                td(escape(&r.action)),
                num(r.attempts),
                bad(r.last_error.as_deref()),
                td(requeue_button(&r.idempotency_key, forms)),
            ]
        })
        .collect();
    let alert_rows: Vec<Vec<String>> = alerts
        .iter()
        .map(|a| {
            let status = match (a.status, a.note.as_deref()) {
                (OutboxStatus::Sent, Some(_)) => "logged".to_string(),
                (status, _) => status.name().to_string(),
            };
            vec![
                td(time(Some(a.created_at))),
                code(&a.source),
                td(escape(a.text.as_deref().unwrap_or_default())),
                td(escape(&status)),
            ]
        })
        .collect();
    let notice = notice_html(notice);
    let body = format!(
        r#"{LOGOUT}{notice}<p class="muted">Counters: deliveries counted by the worker, flushed every few seconds. Events, failures and side effects: counted in D1.</p>
<h2>Sources</h2>{}
<h2>Trend</h2>{}
<h2>Recent events</h2><p><a href="/admin/events">Find events: by id, source, type, status and day →</a> · <a href="/admin/destinations">Destinations →</a></p>{}
<h2>Failed events</h2>{}
<h2>Dead side effects</h2>{}{handoff}
<h2>Alerts</h2><p class="muted">Sent to <code>ALERT_URL</code> (logged only while it is unset): one per kind and source in each <code>ALERT_INTERVAL</code>.</p>{}"#,
        table(
            &[
                "source",
                "received",
                "processed",
                "duplicates",
                "rejected",
                "events in ledger",
                "failed",
                "side effects sent",
                "dead"
            ],
            &counters
        ),
        trend::section(&trends, now_minute),
        table(
            &["processed at", "source", "event", "type", "status"],
            &recent
        ),
        table(
            &["failed at", "source", "event", "type", "last error", ""],
            &failures
        ),
        table(
            &["updated", "event", "action", "attempts", "last error", ""],
            &dead_rows
        ),
        table(&["raised", "source", "alert", "status"], &alert_rows),
    );
    page(200, "Webhooks", &body)
}

/// How a delivery was verified: the scheme and the position of the secret
/// that matched; the time the signature covers, and how long before the
/// delivery arrived that was (a replay shows as old).
fn verified_cells(delivery: &LoggedDelivery) -> [String; 2] {
    let Some(verified) = &delivery.verified else {
        let unknown = || td(r#"<span class="muted">not kept (an older release)</span>"#.into());
        return [unknown(), unknown()];
    };
    let scheme = td(format!(
        "<code>{}</code><br>secret {} (by position)",
        escape(&verified.scheme),
        verified.secret
    ));
    let signed = match verified.signed_at {
        Some(at) => {
            let at_ms = i64::try_from(at).unwrap_or(i64::MAX).saturating_mul(1000);
            let age = delivery.at.saturating_sub(at_ms) / 1000;
            let when = match age {
                0 => "the second it arrived".to_string(),
                n if n > 0 => format!("{n} s before it arrived"),
                n => format!("{} s after it arrived (the sender's clock)", -n),
            };
            td(format!("{}<br><small>{when}</small>", time(Some(at_ms))))
        }
        None => td(r#"<span class="muted">no signed time in this scheme</span>"#.into()),
    };
    [scheme, signed]
}

/// One event's page; `forms` and `notice` as for [`overview`].
pub async fn event(
    env: &Env,
    source: &str,
    id: &str,
    notice: Option<&str>,
    forms: &str,
) -> Result<Response> {
    let event = queries::event(env, source, id).await?;
    let inbox = event.inbox.map(|state| state.decode()).transpose()?;
    let records = event.records.decode()?;
    let notice = notice_html(notice);
    let inbox = inbox.as_ref();
    // A failed event waits for an operator: one more attempt, or a decision
    // not to apply it. Any other held event may be replayed: a no-op once
    // its effect has committed, which the page then says.
    let actions = match inbox.map(|i| i.state) {
        Some(EventState::Failed) => failed_actions(source, id, forms),
        Some(EventState::Dismissed) | None => String::new(),
        Some(_) => action_button(
            &format!("{}/replay", event_path(source, id)),
            "Replay",
            forms,
        ),
    };
    let inbox_html = match inbox {
        None => r#"<p class="muted">The inbox holds nothing for this event (never received, or past retention).</p>"#.into(),
        Some(inbox) => table(
            &[
                "state",
                "deliveries",
                "effect attempts",
                "received",
                "done",
                "last error",
            ],
            &[vec![
                td(escape(inbox.state.name())),
                num(inbox.deliveries),
                num(inbox.effect_attempts),
                td(time(Some(inbox.received_at))),
                td(time(inbox.done_at)),
                td(html::text(inbox.last_error.as_deref())),
            ]],
        ),
    };
    let log = inbox.map_or(&[][..], |i| &i.delivery_log);
    let first_sha256 = log.first().map(|d| d.sha256.as_str());
    let deliveries: Vec<Vec<String>> = log
        .iter()
        .enumerate()
        .map(|(n, d)| {
            // A copy signed under the same id with other bytes: worth a look.
            let payload = match n {
                0 => td("first".into()),
                _ if Some(d.sha256.as_str()) == first_sha256 => td("same as the first".into()),
                _ => bad(Some("differs from the first")),
            };
            let [scheme, signed] = verified_cells(d);
            vec![
                td(time(Some(d.at))),
                td(escape(d.kind.name())),
                scheme,
                signed,
                num(d.bytes),
                // The first 16 hex digits, the whole hash on hover.
                td(format!(
                    r#"<code title="{0}">{1}…</code>"#,
                    escape(&d.sha256),
                    escape(d.sha256.get(..16).unwrap_or(&d.sha256))
                )),
                payload,
            ]
        })
        .collect();
    let deliveries_html = table(
        &[
            "arrived",
            "delivery",
            "verified by",
            "signed at",
            "bytes",
            "payload SHA-256",
            "payload",
        ],
        &deliveries,
    );
    let payload_html = inbox.map_or(String::new(), |i| {
        format!(
            "<h2>Payload</h2><p class=\"muted\">As the inbox stores it (the first delivery's bytes, exactly as signed), indented for reading.</p>{}",
            html::payload(&i.body)
        )
    });
    let dismissed_at = records.failure.as_ref().and_then(|f| f.dismissed_at);
    let ledger_html = match (&records.ledger, dismissed_at) {
        (None, _) => r#"<p class="muted">No ledger row: the effect has not committed.</p>"#.into(),
        (Some(_), Some(at)) => format!(
            r#"<p class="muted">Dismissed by an operator at {}: no effect was applied, and the ledger row keeps any later copy from applying it.</p>"#,
            time(Some(at))
        ),
        (Some(ledger), None) => table(
            &["type", "received", "processed"],
            &[vec![
                td(escape(&ledger.kind)),
                td(time(Some(ledger.received_at))),
                td(time(Some(ledger.processed_at))),
            ]],
        ),
    };
    let outbox: Vec<Vec<String>> = records
        .outbox
        .iter()
        .map(|r| {
            vec![
                td(escape(&r.action)),
                td(escape(r.status.name())),
                num(r.attempts),
                code(&r.idempotency_key),
                td(html::text(r.note.as_deref())),
                td(html::text(r.last_error.as_deref())),
                td(if r.status == OutboxStatus::Dead {
                    requeue_button(&r.idempotency_key, forms)
                } else {
                    String::new()
                }),
            ]
        })
        .collect();
    let body = format!(
        r#"{LOGOUT}<p><a href="/admin">← all events</a> · <code>{}</code></p>{notice}{actions}
<h2>Deliveries</h2>{inbox_html}
<p class="muted">Every delivery below passed signature verification: nothing else reaches the inbox.</p>{deliveries_html}
{payload_html}
<h2>Effect</h2>{ledger_html}
<h2>Side effects</h2>{}
<h2>Forwarded</h2>{}"#,
        escape(&format!("{source}:{id}")),
        table(
            &[
                "action",
                "status",
                "attempts",
                "idempotency key",
                "note",
                "last error",
                ""
            ],
            &outbox
        ),
        forwarding::deliveries(source, id, &records.forwards, forms),
    );
    page(200, &format!("Event {}", escape(id)), &body)
}
