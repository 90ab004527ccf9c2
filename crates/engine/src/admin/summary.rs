//! The overview's per-source totals, summed from the counters and counts
//! D1 holds: what the page shows, without its HTML.

use super::queries::{SourceCount, Stats};
use crate::inbox::state::Outcome;
use crate::outbox::OutboxStatus;
use crate::stats::Counter;

/// One source's row of the overview.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SourceTotals {
    pub source: String,
    /// Deliveries the worker counted, by outcome.
    pub received: i64,
    pub processed: i64,
    pub duplicates: i64,
    /// Every refusal, whatever its reason.
    pub rejected: i64,
    /// Events in the ledger and on the failed list.
    pub in_ledger: i64,
    pub failed: i64,
    /// Side effects sent and dead.
    pub sent: i64,
    pub dead: i64,
}

/// One row per source that appears anywhere, by name.
pub fn per_source(stats: &Stats) -> Vec<SourceTotals> {
    let mut sources: Vec<&str> = (stats.counters.iter().map(|c| c.source.as_str()))
        .chain(stats.processed.iter().map(|c| c.source.as_str()))
        .chain(stats.failed.iter().map(|c| c.source.as_str()))
        .chain(stats.outbox.iter().map(|c| c.source.as_str()))
        .collect();
    sources.sort_unstable();
    sources.dedup();
    let counter = |source: &str, wanted: &dyn Fn(Counter) -> bool| -> i64 {
        let values = stats.counters.iter().filter(|c| c.source == source);
        values
            .filter(|c| wanted(Counter::parse(&c.counter)))
            .map(|c| c.value as i64)
            .sum()
    };
    let events = |counts: &[SourceCount], source: &str| -> i64 {
        let counts = counts.iter().filter(|c| c.source == source);
        counts.map(|c| c.events as i64).sum()
    };
    let rows = |source: &str, status: OutboxStatus| -> i64 {
        let counts = stats.outbox.iter().filter(|c| c.source == source);
        counts
            .filter(|c| c.status == status)
            .map(|c| c.rows as i64)
            .sum()
    };
    sources
        .into_iter()
        .map(|s| SourceTotals {
            source: s.to_string(),
            received: counter(s, &|c| c == Counter::Received),
            processed: counter(s, &|c| c == Counter::Outcome(Outcome::Processed.name())),
            duplicates: counter(s, &|c| c == Counter::Outcome(Outcome::Duplicate.name())),
            rejected: counter(s, &|c| matches!(c, Counter::Rejected(_))),
            in_ledger: events(&stats.processed, s),
            failed: events(&stats.failed, s),
            sent: rows(s, OutboxStatus::Sent),
            dead: rows(s, OutboxStatus::Dead),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::queries::{Counter, OutboxCount};

    #[test]
    fn every_source_that_appears_anywhere_gets_one_row_of_sums() {
        let counter = |source: &str, counter: &str, value| Counter {
            source: source.into(),
            counter: counter.into(),
            value,
        };
        let stats = Stats {
            counters: vec![
                counter("beta", "received", 3),
                counter("beta", "rejected:bad_signature", 2),
                counter("beta", "rejected:stale_timestamp", 1),
                counter("beta", "duplicate", 1),
            ],
            processed: vec![SourceCount {
                source: "beta".into(),
                events: 2,
            }],
            failed: vec![SourceCount {
                source: "alpha".into(),
                events: 1,
            }],
            outbox: vec![OutboxCount {
                source: "beta".into(),
                status: OutboxStatus::Dead,
                rows: 4,
            }],
        };
        let rows = per_source(&stats);
        assert_eq!(
            rows.iter().map(|r| r.source.as_str()).collect::<Vec<_>>(),
            ["alpha", "beta"]
        );
        assert_eq!(rows[0].failed, 1);
        let beta = &rows[1];
        assert_eq!(
            (
                beta.received,
                beta.rejected,
                beta.duplicates,
                beta.in_ledger,
                beta.dead
            ),
            (3, 3, 1, 2, 4)
        );
    }
}
