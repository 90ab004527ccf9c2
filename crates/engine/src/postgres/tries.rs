//! The relay's tries: which of a batch's failures count against a row, and
//! the row given up on at [`STUCK_TRIES`], alerted before the commit that
//! counts its last try.

use std::pin::pin;
use std::time::Duration;

use futures_util::future::{select, Either};
use worker::Delay;

use crate::clock::now_ms;
use crate::d1::{Db, Statement};
use crate::handoff_rows::Row;
use crate::log::{self, Line};
use crate::outbox::notify_operator::{self, Alert};
use crate::settings::Settings;

/// After so many failures the relay no longer claims a row, and alerts it:
/// ten cron runs at least, past any passing refusal, and a cap on the D1
/// calls that a row which never goes costs.
pub(crate) const STUCK_TRIES: i32 = 10;

/// The D1 calls, and the time (ms), a batch keeps for [`counted`]: its
/// probe and its alert.
pub(super) const KEPT_CALLS: usize = 2;
pub(super) const KEPT_MS: i64 = 500;

/// What the relay's claim says of a row besides its contents.
pub(super) struct Claimed {
    kind: String,
    key: String,
    source: String,
    event_id: String,
    tries: i32,
}

impl Claimed {
    /// Read as the claim selects it (`kind, key, params, source, event_id,
    /// tries`); `None` for a row that cannot be, which `read_all` reports.
    pub(super) fn of(row: &tokio_postgres::Row) -> Option<Claimed> {
        Some(Claimed {
            kind: row.try_get(0).ok()?,
            key: row.try_get(1).ok()?,
            source: row.try_get(3).ok()?,
            event_id: row.try_get(4).ok()?,
            tries: row.try_get(5).ok()?,
        })
    }
}

/// The failures of a batch that count a try, as `(kind, key)`: the rows
/// unreadable, and those D1 refused alone, if D1 answers a query after the
/// last refusal (a row refused while D1 answers nothing was not refused for
/// what it holds). A row whose try is its last is alerted first; if the
/// alert cannot be written, that try is not counted, so that the next run
/// alerts it. D1 calls spend `calls`, each within `until`.
pub(super) async fn counted(
    db: &Db,
    settings: &Settings,
    claimed: &[Claimed],
    unreadable: Vec<(String, String)>,
    refused: &[Row],
    until: i64,
    calls: &mut usize,
) -> Vec<(String, String)> {
    let mut tried = unreadable;
    let probe = [Statement::new("SELECT 1", Vec::new())];
    if !refused.is_empty() && ran(db, &probe, until, calls).await {
        tried.extend(
            refused
                .iter()
                .map(|row| (row.kind.name().into(), row.key.clone())),
        );
    }
    let last: Vec<&Claimed> = claimed
        .iter()
        .filter(|c| c.tries + 1 >= STUCK_TRIES)
        .filter(|c| {
            tried
                .iter()
                .any(|(kind, key)| *kind == c.kind && *key == c.key)
        })
        .collect();
    if last.is_empty() || ran(db, &alerts(settings, &last), until, calls).await {
        return tried;
    }
    // Its row stays at its last try, tried each run, until the alert goes.
    for row in &last {
        let detail = format!(
            "handoff_stuck {} {}: its last try is not counted",
            row.kind, row.key
        );
        log::error(&Line::new("alert_failed").detail(detail));
    }
    tried.retain(|(kind, key)| !last.iter().any(|c| c.kind == *kind && c.key == *key));
    tried
}

/// Logs each row given up on (`handoff_stuck`); returns its alerts' rows,
/// one per source in each alert interval.
fn alerts(settings: &Settings, last: &[&Claimed]) -> Vec<Statement> {
    let alerts = notify_operator::settings(settings);
    let now = now_ms();
    last.iter()
        .map(|row| {
            let (kind, key, source, id) = (&row.kind, &row.key, &row.source, &row.event_id);
            let detail = format!("{kind} {key} of {source}:{id}, after {STUCK_TRIES} tries");
            log::error(&Line::new("handoff_stuck").detail(detail));
            let alert = Alert::HandOffStuck {
                source,
                event_id: id,
                kind,
                key,
                tries: STUCK_TRIES.into(),
            };
            alert.row(&alerts, now).0
        })
        .collect()
}

/// Whether D1 ran `statements`, with a call left and before `until`.
async fn ran(db: &Db, statements: &[Statement], until: i64, calls: &mut usize) -> bool {
    let left = until - now_ms();
    if *calls == 0 || left <= 0 {
        return false;
    }
    *calls -= 1;
    let call = pin!(db.batch(statements));
    let timeout = pin!(Delay::from(Duration::from_millis(left.unsigned_abs())));
    matches!(select(call, timeout).await, Either::Left((Ok(()), _)))
}
