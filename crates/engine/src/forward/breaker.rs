//! Each destination's circuit breaker and the operators' switches, in the
//! `destinations` table (no row: closed, never failed).
//!
//! After `FORWARD_BREAKER_FAILURES` failed attempts in a row a destination
//! opens: the consumer's claim skips its deliveries, which wait as
//! `pending` without spending attempts, and one probe goes out per
//! `FORWARD_PROBE_SECS`. A success closes it, and its backlog drains oldest
//! first. A 410 disables it, and a pause holds it, until an operator says
//! otherwise. Every change the breaker makes (opened, closed, disabled)
//! alerts the operators, in the same transaction.

use crate::config::{AlertSettings, ForwardSettings};
use crate::d1::Statement;
use crate::outbox::notify_operator::Alert;

/// The destinations whose deliveries a claim and the relay skip: paused,
/// disabled or open. A macro, for `concat!`.
macro_rules! held {
    () => {
        "SELECT name FROM destinations WHERE state != 'closed' OR paused = 1"
    };
}
pub(super) use held;

/// Deliveries the drain re-sends, paced, when a destination closes or is
/// resumed; the cron relay sends the rest, up to a thousand a minute
/// shared among the usable destinations.
pub const DRAIN_PAGE: i64 = 500;

/// What one batch's attempts at one destination came to.
#[derive(Debug, Default)]
pub struct Tally {
    pub delivered: usize,
    /// Attempts that count toward the breaker: no answer, 408, 429, 5xx.
    pub failed: usize,
    /// A 410.
    pub gone: bool,
    /// The last error, for the console.
    pub last_error: Option<String>,
    /// One of them was its probe: a success closes it.
    pub probed: bool,
}

/// What a statement of [`statements`] means when it changes a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meaning {
    /// Nothing to do after.
    Nothing,
    /// The destination closed: drain it.
    Closed(String),
    /// An alert's row was written: send it.
    Alert(String),
}

/// The statements recording `tally` for destination `name`, each with its
/// meaning. `now` in ms.
pub fn statements(
    name: &str,
    tally: &Tally,
    settings: &ForwardSettings,
    alerts: &AlertSettings,
    now: i64,
) -> Vec<(Statement, Meaning)> {
    let mut out = Vec::new();
    let alert = |state: &'static str, why: &str| {
        let (row, key) = Alert::Destination {
            name,
            state,
            since: now,
            why,
        }
        .row(alerts, now);
        (row, Meaning::Alert(key))
    };
    let error = tally.last_error.as_deref().unwrap_or("");
    if tally.delivered > 0 && tally.probed {
        out.push((
            Statement::new(
                "UPDATE destinations SET state = 'closed', state_since = ?2, failures = 0, \
                     updated_at = ?2 WHERE name = ?1 AND state = 'open'",
                vec![name.into(), now.into()],
            ),
            Meaning::Closed(name.to_string()),
        ));
        out.push(alert("closed", ""));
    }
    if tally.delivered > 0 {
        // Failures in a row end with a success, whichever batch saw them:
        // one statement per batch, which writes only when there were some.
        out.push((
            Statement::new(
                "UPDATE destinations SET failures = 0, updated_at = ?2 \
                 WHERE name = ?1 AND failures > 0",
                vec![name.into(), now.into()],
            ),
            Meaning::Nothing,
        ));
    }
    if tally.last_error.is_some() {
        let failed = if tally.delivered > 0 { 0 } else { tally.failed };
        out.push((
            Statement::new(
                "INSERT INTO destinations (name, failures, last_error, last_error_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (name) DO UPDATE SET \
                     failures = failures + ?2, last_error = ?3, last_error_at = ?4, updated_at = ?4",
                vec![
                    name.into(),
                    (failed as i64).into(),
                    error.into(),
                    now.into(),
                ],
            ),
            Meaning::Nothing,
        ));
        if failed > 0 {
            out.push((
                Statement::new(
                    "UPDATE destinations SET state = 'open', state_since = ?2, probe_at = ?3 \
                     WHERE name = ?1 AND state = 'closed' AND failures >= ?4",
                    vec![
                        name.into(),
                        now.into(),
                        (now + i64::from(settings.probe_secs) * 1000).into(),
                        settings.breaker_failures.into(),
                    ],
                ),
                Meaning::Nothing,
            ));
            out.push(alert("open", error));
        }
    }
    if tally.gone {
        out.push((
            Statement::new(
                "UPDATE destinations SET state = 'disabled', state_since = ?2, updated_at = ?2 \
                 WHERE name = ?1 AND state != 'disabled'",
                vec![name.into(), now.into()],
            ),
            Meaning::Nothing,
        ));
        out.push(alert("disabled", error));
    }
    out
}

/// Takes the probe of an open destination whose probe is due: only one
/// consumer run's update changes the row.
pub fn take_probe(name: &str, settings: &ForwardSettings, now: i64) -> Statement {
    Statement::new(
        "UPDATE destinations SET probe_at = ?3 \
         WHERE name = ?1 AND state = 'open' AND paused = 0 AND probe_at <= ?2",
        vec![
            name.into(),
            now.into(),
            (now + i64::from(settings.probe_secs) * 1000).into(),
        ],
    )
}

/// The oldest waiting deliveries of a destination, to re-send.
pub fn backlog(name: &str, limit: i64) -> Statement {
    Statement::new(
        "SELECT delivery_id FROM forwards WHERE destination = ?1 AND status = 'pending' \
         ORDER BY created_at LIMIT ?2",
        vec![name.into(), limit.into()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OutboxSettings;

    fn settings() -> ForwardSettings {
        ForwardSettings {
            outbox: OutboxSettings {
                max_attempts: 5,
                retry_base_secs: 1,
                lease_ms: 60_000,
                relay_grace_ms: 60_000,
            },
            breaker_failures: 3,
            probe_secs: 10,
        }
    }

    const ALERTS: AlertSettings = AlertSettings {
        interval_ms: 60_000,
        refusals_per_minute: 60,
    };

    fn sql(tally: Tally) -> Vec<String> {
        statements("backend", &tally, &settings(), &ALERTS, 1_000)
            .into_iter()
            .map(|(statement, _)| {
                statement
                    .sql
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn a_healthy_destination_costs_one_statement_that_writes_nothing() {
        let tally = Tally {
            delivered: 10,
            ..Tally::default()
        };
        assert_eq!(sql(tally), ["UPDATE destinations SET"]);
    }

    #[test]
    fn failures_count_and_may_open_with_an_alert() {
        let tally = Tally {
            failed: 2,
            last_error: Some("target answered 503".into()),
            ..Tally::default()
        };
        assert_eq!(
            sql(tally),
            [
                "INSERT INTO destinations",
                "UPDATE destinations SET",
                "INSERT INTO outbox"
            ]
        );
    }

    #[test]
    fn a_success_after_failures_closes_and_resets() {
        let tally = Tally {
            delivered: 1,
            probed: true,
            ..Tally::default()
        };
        let all = statements("backend", &tally, &settings(), &ALERTS, 1_000);
        assert_eq!(all[0].1, Meaning::Closed("backend".into()));
        assert!(matches!(all[1].1, Meaning::Alert(_)));
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn a_410_disables_with_an_alert() {
        let tally = Tally {
            gone: true,
            last_error: Some("target answered 410".into()),
            ..Tally::default()
        };
        assert_eq!(
            sql(tally),
            [
                "INSERT INTO destinations",
                "UPDATE destinations SET",
                "INSERT INTO outbox"
            ]
        );
    }
}
