//! The hand-off to D1, where effects commit in Postgres: how many rows
//! wait, since when, and the rows the relay gave up on, for the API and
//! the overview; and the operator's retry of those. Read from Postgres,
//! which holds them (D1 lacks them by definition).

use worker::Env;

use crate::config::Store;
use crate::log::{self, Line};
use crate::postgres::{self, Backlog, PgError};
use crate::settings::Settings;

/// What there is to say of the hand-off.
pub enum HandOff {
    /// Effects commit in D1: nothing is handed off.
    None,
    Backlog(Backlog),
    /// Postgres did not answer, or lacks a migration.
    Unavailable(PgError),
}

/// Whether effects commit in Postgres.
fn on_postgres(settings: &Settings) -> bool {
    matches!(
        settings.inbox().map(|inbox| inbox.store),
        Ok(Store::Postgres)
    )
}

/// The backlog, listing at most `limit` stuck rows.
pub async fn read(env: &Env, settings: &Settings, limit: i64) -> HandOff {
    if !on_postgres(settings) {
        return HandOff::None;
    }
    match postgres::backlog(env, limit).await {
        Ok(backlog) => HandOff::Backlog(backlog),
        Err(e) => {
            log::error(&Line::new("handoff_backlog_failed").error(e.message()));
            HandOff::Unavailable(e)
        }
    }
}

/// The API's status for `error`: 500 for a migration missing (as an
/// event's reply says), else 503.
#[cfg(feature = "admin")]
pub fn status(error: &PgError) -> u16 {
    match error {
        PgError::Behind(_) => 500,
        _ => 503,
    }
}

/// Makes the stuck rows due again: how many, `None` where nothing is handed
/// off, or why not.
pub async fn retry(env: &Env, settings: &Settings) -> Result<Option<i64>, PgError> {
    if !on_postgres(settings) {
        return Ok(None);
    }
    match postgres::retry_stuck(env).await {
        Ok(count) => Ok(Some(count)),
        Err(e) => {
            log::error(&Line::new("handoff_retry_failed").error(e.message()));
            Err(e)
        }
    }
}

/// The overview's section: nothing where nothing is handed off.
#[cfg(feature = "dashboard")]
pub fn section(handoff: &HandOff, forms: &str, now: i64) -> String {
    use super::html::{action_button, code, escape, num, table, td, time};
    use super::pages::event_link;
    let backlog = match handoff {
        HandOff::None => return String::new(),
        HandOff::Unavailable(e) => {
            return format!(
                r#"<h2>Hand-off to D1</h2><p class="bad">Not read: {}</p>"#,
                escape(&e.message())
            )
        }
        HandOff::Backlog(backlog) => backlog,
    };
    let more = if backlog.waiting_more { "+" } else { "" };
    let oldest = backlog.oldest_created_at.map_or(String::new(), |at| {
        format!(
            ", the oldest (stuck ones included) written {} ({} s ago)",
            time(Some(at)),
            (now - at).max(0) / 1000
        )
    });
    let rows: Vec<Vec<String>> = backlog
        .stuck_rows
        .iter()
        .map(|r| {
            vec![
                td(time(Some(r.created_at))),
                event_link(&r.source, &r.event_id),
                td(escape(&r.kind)),
                code(&r.key),
                num(r.tries.into()),
            ]
        })
        .collect();
    let stuck = match backlog.stuck {
        0 => String::new(),
        n => format!(
            r#"<p class="bad">{n} row(s) stuck{}: the relay failed {} times to hand each off, and no longer tries. The <code>handoff_refused</code> (D1 refused it) and <code>handoff_unreadable</code> log lines say why.</p>{}{}"#,
            match backlog.stuck_rows.len() {
                shown if (shown as i64) < n => format!(", the oldest {shown} below"),
                _ => String::new(),
            },
            backlog.stuck_after_tries,
            table(&["written", "event", "kind", "key", "tries"], &rows),
            action_button("/admin/handoff/retry", "Retry stuck rows", forms)
        ),
    };
    format!(
        r#"<h2>Hand-off to D1</h2><p class="muted">Effects commit in Postgres; D1 gets their ledger, side-effect and delivery rows after. {}{more} row(s) waiting{oldest}.</p>{stuck}"#,
        backlog.waiting
    )
}
