//! The dashboard's forwarding: `/admin/destinations` (each destination's
//! state, backlog, dead count, success rate, latency and last error, with
//! its actions) and the deliveries section of an event's page.

use worker::{Env, Response, Result};

use super::encode;
use super::html::{
    self, action_button, bad, code, escape, event_path, notice_html, num, page, table, td, time,
    LOGOUT,
};
use crate::forward::operate::DestinationAction;
use crate::forward::report::{self, DeliveryReport, DestinationReport};
use crate::forward::ForwardStatus;
use crate::settings::Settings;

/// `/admin/destinations`.
pub async fn destinations(
    env: &Env,
    settings: &Settings,
    forms: &str,
    notice: Option<&str>,
) -> Result<Response> {
    let rows: Vec<Vec<String>> = report::destinations(env, settings)
        .await?
        .iter()
        .map(|d| destination_row(d, forms))
        .collect();
    let body = format!(
        r#"{LOGOUT}<p><a href="/admin">← overview</a></p>{}
<p class="muted">Declared in <code>[vars.DESTINATIONS]</code>. Success rate and latency: the deliveries of the last hour. A paused, open or disabled destination's deliveries wait without spending attempts.</p>{}"#,
        notice_html(notice),
        table(
            &[
                "destination",
                "state",
                "backlog",
                "dead",
                "success rate",
                "p50 / p99",
                "last error",
                "",
            ],
            &rows
        )
    );
    page(200, "Destinations", &body)
}

fn destination_row(d: &DestinationReport, forms: &str) -> Vec<String> {
    let state = match (d.state.as_str(), d.paused) {
        ("closed", false) => td(r#"<span class="ok">closed</span>"#.into()),
        (state, paused) => bad(Some(&format!(
            "{state}{}",
            if paused { ", paused" } else { "" }
        ))),
    };
    let declared = if d.declared {
        code(&d.name)
    } else {
        td(format!(
            "<code>{}</code> <small>(no longer declared)</small>",
            escape(&d.name)
        ))
    };
    // In tenths of a percent, without float formatting's code in the wasm.
    let rate = d.success_rate.map_or("–".into(), |rate| {
        let tenths = (rate * 1000.0).round() as i64;
        format!("{}.{}%", tenths / 10, tenths % 10)
    });
    let button = |action: DestinationAction, label: &str| {
        let path = format!("/admin/destinations/{}/{}", encode(&d.name), action.name());
        action_button(&path, label, forms)
    };
    let mut actions = String::new();
    if !d.declared {
        if d.backlog > 0 {
            actions += &button(DestinationAction::Discard, "Discard held");
        }
        return row(d, declared, state, rate, actions);
    }
    if d.dead > 0 {
        actions += &button(DestinationAction::Requeue, "Requeue dead");
    }
    actions += &if d.paused {
        button(DestinationAction::Resume, "Resume")
    } else {
        button(DestinationAction::Pause, "Pause")
    };
    if d.state != "closed" {
        actions += &button(DestinationAction::Enable, "Re-enable");
    }
    row(d, declared, state, rate, actions)
}

/// A destination's cells, given the first two, its rate and its actions.
fn row(
    d: &DestinationReport,
    declared: String,
    state: String,
    rate: String,
    actions: String,
) -> Vec<String> {
    let ms = |v: Option<i64>| v.map_or("–".into(), |ms| format!("{ms} ms"));
    vec![
        declared,
        state,
        num(d.backlog),
        num(d.dead),
        td(rate),
        td(format!("{} / {}", ms(d.p50_ms), ms(d.p99_ms))),
        td(format!(
            "{}<br><small>{}</small>",
            html::text(d.last_error.as_deref()),
            time(d.last_error_at)
        )),
        td(actions),
    ]
}

/// The event page's deliveries to destinations, each with Redeliver.
pub fn deliveries(source: &str, id: &str, forwards: &[DeliveryReport], forms: &str) -> String {
    if forwards.is_empty() {
        return r#"<p class="muted">Not forwarded: its source forwards nowhere, or not events of this type.</p>"#.into();
    }
    let rows: Vec<Vec<String>> = forwards
        .iter()
        .map(|f| {
            let redeliver = matches!(
                ForwardStatus::from_name(&f.status),
                Some(ForwardStatus::Dead | ForwardStatus::Delivered)
            );
            let path = format!(
                "{}/redeliver/{}",
                event_path(source, id),
                encode(&f.delivery_id)
            );
            vec![
                td(format!(
                    r#"<a href="/admin/destinations"><code>{}</code></a>"#,
                    escape(&f.destination)
                )),
                td(escape(&f.status)),
                num(f.attempts),
                td(f.last_status.map_or("–".into(), |s| s.to_string())),
                td(f.latency_ms.map_or("–".into(), |ms| format!("{ms} ms"))),
                td(time(f.delivered_at)),
                td(html::text(f.last_error.as_deref())),
                code(&f.delivery_id),
                td(if redeliver {
                    action_button(&path, "Redeliver", forms)
                } else {
                    String::new()
                }),
            ]
        })
        .collect();
    table(
        &[
            "destination",
            "status",
            "attempts",
            "last answer",
            "latency",
            "delivered",
            "last error",
            "webhook-id",
            "",
        ],
        &rows,
    )
}
