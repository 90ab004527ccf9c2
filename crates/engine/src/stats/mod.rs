//! Per-source delivery counters for operators: `received`, `processed`,
//! `duplicate`, `accepted`, `failed`, `handshake`, `rejected:<reason>`,
//! `replayed_body`, and `secret:<position>` — which configured secret
//! verified each delivery, so that the old secret of a rotation can be
//! retired once its count stops growing.
//!
//! Counting must not slow the delivery path or put D1 on a replay's way, so
//! each isolate counts in memory and adds its counts to D1
//! (`source_counters`) at most every `STATS_FLUSH_MS` (default 10 s), after
//! the response (`wait_until`). Counts that arrive within the interval are
//! flushed by one delayed flush when it is over, kept alive by the
//! request's `wait_until`, so that a burst's tail (and its refusal alert)
//! reaches D1 without waiting for another request (an interval of up to
//! 20 s: the runtime keeps that work 30 s). They are telemetry, not
//! truth: an isolate that is evicted loses at most its unflushed counts.
//! What must be exact —
//! processed events, failures, side effects — the admin API counts from the
//! ledger, `failed_events` and `outbox` instead.
//!
//! Beside the totals, the trend: deliveries per source, minute and
//! [`Series`] (`delivery_trend`), for the dashboard's charts of the last
//! hour and day. Flushed the same way; rows older than [`TREND_KEPT_MINUTES`]
//! are deleted as new ones are added, so the table stays bounded.

mod pending;

use std::rc::Rc;

use worker::Env;

use crate::clock;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};
use crate::names::named_enum;
use crate::outbox;
use crate::outbox::notify_operator::{self, Alert};
use crate::settings::Settings;

use self::pending::Wake;
pub use self::pending::{count, count_trend, take_due, Due, Sleeper};

/// A per-source counter, by the name it is stored under: the one way both
/// the receiver that counts and the pages that read it spell them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter<'a> {
    /// Every delivery, whatever became of it.
    Received,
    /// A delivery that was not refused, by its outcome (`processed`,
    /// `duplicate`, `accepted`, `failed`, `handshake`).
    Outcome(&'a str),
    /// A refused delivery, by its reason.
    Rejected(&'a str),
    /// A signed body already applied under another id.
    ReplayedBody,
    /// The position of the configured secret that verified the delivery.
    Secret(usize),
}

impl<'a> Counter<'a> {
    /// The stored name.
    pub fn name(self) -> String {
        match self {
            Counter::Received => "received".into(),
            Counter::Outcome(outcome) => outcome.into(),
            Counter::Rejected(reason) => format!("rejected:{reason}"),
            Counter::ReplayedBody => "replayed_body".into(),
            Counter::Secret(position) => format!("secret:{position}"),
        }
    }

    #[cfg(feature = "dashboard")]
    /// Reads a stored name back.
    pub fn parse(name: &'a str) -> Counter<'a> {
        if let Some(reason) = name.strip_prefix("rejected:") {
            return Counter::Rejected(reason);
        }
        if let Some(position) = name.strip_prefix("secret:").and_then(|p| p.parse().ok()) {
            return Counter::Secret(position);
        }
        match name {
            "received" => Counter::Received,
            "replayed_body" => Counter::ReplayedBody,
            outcome => Counter::Outcome(outcome),
        }
    }
}

named_enum! {
    /// What the trend splits deliveries by, bottom to top in a chart's bars:
    /// refusals on top, where a spike shows.
    pub enum Series {
        Processed = "processed",
        Duplicate = "duplicate",
        /// Recorded, its effect to be retried by the inbox.
        Accepted = "accepted",
        /// An event that gave up: counted when it is listed (`failed_events`),
        /// whether on a delivery's attempt or on the inbox's alarm, not as a
        /// delivery's outcome, so that it is counted once.
        Failed = "failed",
        /// Refused for any reason: a bad signature, a stale timestamp, a
        /// malformed body, an unknown source, a misconfiguration.
        Refused = "refused",
    }
}

impl Series {
    /// The series a delivery counts in, by its outcome; `None` for a
    /// handshake (not an event) and for `failed` (see [`Series::Failed`]).
    pub fn of_delivery(outcome: &str, refused: bool) -> Option<Series> {
        if refused {
            return Some(Series::Refused);
        }
        Series::from_name(outcome).filter(|s| !matches!(s, Series::Refused | Series::Failed))
    }
}

/// How long trend rows are kept: a day of hourly bars, the oldest hour
/// whole, with margin.
pub const TREND_KEPT_MINUTES: i64 = 25 * 60;

/// Counts not yet in D1.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `(source, counter, n)`: added to the all-time totals.
    pub totals: Vec<(String, String, u64)>,
    /// `(minute since the epoch, source, series, n)`: added to the trend.
    pub trend: Vec<(i64, String, Series, u64)>,
}

impl Counts {
    pub(crate) fn is_empty(&self) -> bool {
        self.totals.is_empty() && self.trend.is_empty()
    }
}

/// Sleeps, then flushes what was counted meanwhile once the interval has
/// passed (for a request's `wait_until`).
pub async fn flush_later(env: Env, settings: Rc<Settings>, sleeper: Sleeper) {
    let interval_ms = settings.stats_flush_ms;
    let mut sleep_ms = sleeper.sleep_ms;
    loop {
        worker::Delay::from(std::time::Duration::from_millis(sleep_ms)).await;
        let now = clock::now_ms();
        match pending::wake(sleeper, now as u64, interval_ms) {
            Wake::Flush(counts) => return flush(env, settings, counts, now).await,
            Wake::Again(ms) => sleep_ms = ms,
            Wake::Done => return,
        }
    }
}

/// The statements adding `counts` to D1, and pruning the trend's old rows
/// (`now_ms` says which are old).
fn statements(counts: &Counts, now_ms: i64) -> Vec<Statement> {
    let totals = counts.totals.iter().map(|(source, counter, n)| {
        Statement::new(
            "INSERT INTO source_counters (source, counter, value) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (source, counter) DO UPDATE SET value = value + excluded.value",
            vec![
                source.as_str().into(),
                counter.as_str().into(),
                (*n as i64).into(),
            ],
        )
    });
    let trend = counts.trend.iter().map(|(minute, source, series, n)| {
        Statement::new(
            "INSERT INTO delivery_trend (minute, source, outcome, value) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (minute, source, outcome) DO UPDATE SET value = value + excluded.value",
            vec![
                (*minute).into(),
                source.as_str().into(),
                series.name().into(),
                (*n as i64).into(),
            ],
        )
    });
    let prune = (!counts.trend.is_empty()).then(|| {
        let oldest_kept = now_ms.div_euclid(60_000) - TREND_KEPT_MINUTES;
        Statement::new(
            "DELETE FROM delivery_trend WHERE minute < ?1",
            vec![oldest_kept.into()],
        )
    });
    totals.chain(trend).chain(prune).collect()
}

/// Adds the counts to D1 in one batch; in the same transaction, after
/// them, alerts the operators of each source whose refusals in a minute
/// reached `ALERT_REFUSALS_PER_MINUTE` (counted across isolates: the
/// alert's row is conditional on the sum in D1), and sends the alerts
/// written. On failure the counts are logged and dropped: telemetry is not
/// worth a retry loop.
pub async fn flush(env: Env, settings: Rc<Settings>, counts: Counts, now_ms: i64) {
    let (alerts, keys) = refusal_alerts(&settings, &counts, now_ms);
    let mut statements = statements(&counts, now_ms);
    let first_alert = statements.len();
    statements.extend(alerts);
    let result = match Db::from_env(&env) {
        Ok(db) => db.batch_changes(&statements).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(changes) => {
            let written = changes.get(first_alert..).unwrap_or_default();
            for (key, n) in keys.into_iter().zip(written) {
                if *n > 0 {
                    outbox::enqueue_now(&env, key).await;
                }
            }
        }
        Err(e) => {
            let n = counts.totals.len() + counts.trend.len();
            log::error(&Line::new("stats_flush_failed").counts(n).error(e));
        }
    }
}

/// One conditional alert row per source and minute with refusals in
/// `counts`, and its key: written once the minute's sum reaches the
/// threshold, once per alert bucket. Requests to sources that do not exist
/// (`(unknown)`, a scanner) are charted, never alerted.
fn refusal_alerts(
    engine: &Settings,
    counts: &Counts,
    now_ms: i64,
) -> (Vec<Statement>, Vec<String>) {
    let refused = counts
        .trend
        .iter()
        .filter(|(_, source, series, _)| *series == Series::Refused && source != UNKNOWN_SOURCE);
    let mut settings = None;
    refused
        .map(|(minute, source, _, _)| {
            let settings = settings.get_or_insert_with(|| notify_operator::settings(engine));
            let alert = Alert::Refusals {
                source,
                minute: *minute,
            };
            alert.row(settings, now_ms)
        })
        .unzip()
}

/// What requests to sources that do not exist are counted under, so that a
/// prober cannot fill the tables with names.
pub const UNKNOWN_SOURCE: &str = "(unknown)";

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "dashboard")]
    #[test]
    fn counters_read_back_as_written() {
        for counter in [
            Counter::Received,
            Counter::Outcome("processed"),
            Counter::Rejected("bad_signature"),
            Counter::ReplayedBody,
            Counter::Secret(1),
        ] {
            assert_eq!(Counter::parse(&counter.name()), counter);
        }
    }

    #[test]
    fn the_trend_counts_per_minute_and_prunes_a_day_back() {
        let at = 1_700_000_000_000; // 2023-11-14T22:13:20Z: 20 s into a minute
        count_trend(at, "beta", Series::Refused);
        count_trend(at + 39_999, "beta", Series::Refused);
        count_trend(at + 40_000, "beta", Series::Refused);
        count_trend(at, "beta", Series::Processed);
        let Due::Now(counts) = take_due(u64::MAX, 0) else {
            panic!("due at once");
        };
        let minute = at / 60_000;
        assert_eq!(
            counts.trend,
            vec![
                (minute, "beta".into(), Series::Refused, 2),
                (minute + 1, "beta".into(), Series::Refused, 1),
                (minute, "beta".into(), Series::Processed, 1),
            ]
        );
        let statements = statements(&counts, at);
        assert_eq!(statements.len(), 4, "three trend rows and the prune");
        let prune = statements.last().unwrap();
        assert!(prune.sql.starts_with("DELETE FROM delivery_trend"));
        assert_eq!(prune.params, vec![(minute - 25 * 60).into()]);
    }

    #[test]
    fn deliveries_fall_into_series_by_outcome() {
        assert_eq!(
            Series::of_delivery("processed", false),
            Some(Series::Processed)
        );
        assert_eq!(
            Series::of_delivery("duplicate", false),
            Some(Series::Duplicate)
        );
        assert_eq!(
            Series::of_delivery("accepted", false),
            Some(Series::Accepted)
        );
        assert_eq!(
            Series::of_delivery("failed", false),
            None,
            "counted when listed"
        );
        assert_eq!(Series::of_delivery("rejected", true), Some(Series::Refused));
        assert_eq!(Series::of_delivery("handshake", false), None);
        assert_eq!(Series::of_delivery("refused", false), None);
        for series in Series::ALL {
            assert_eq!(Series::from_name(series.name()), Some(*series));
        }
    }
}
