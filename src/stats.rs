//! Per-source delivery counters for operators: `received`, `processed`,
//! `duplicate`, `accepted`, `failed`, `handshake`, `rejected:<reason>`,
//! `replayed_body`, and `secret:<position>` — which configured secret
//! verified each delivery, so that the old secret of a rotation can be
//! retired once its count stops growing.
//!
//! Counting must not slow the delivery path or put D1 on a replay's way, so
//! each isolate counts in memory and adds its counts to D1
//! (`source_counters`) at most every `STATS_FLUSH_MS` (default 10 s), after
//! the response (`wait_until`). They are telemetry, not truth: an isolate
//! that is evicted loses at most its unflushed counts, and counts wait in
//! memory until the next request after the interval. What must be exact —
//! processed events, failures, side effects — the admin API counts from the
//! ledger, `failed_events` and `outbox` instead.

use std::cell::RefCell;

use worker::Env;

use crate::d1::{Db, Statement};
use crate::log::{self, Line};

/// Counts not yet in D1, and when they were last flushed (ms).
#[derive(Default)]
struct Pending {
    counts: Vec<(String, String, u64)>,
    last_flush: u64,
}

thread_local! {
    static PENDING: RefCell<Pending> = RefCell::new(Pending::default());
}

/// Adds one to `source`'s `counter`.
pub fn count(source: &str, counter: &str) {
    PENDING.with(|pending| {
        let counts = &mut pending.borrow_mut().counts;
        match counts
            .iter_mut()
            .find(|(s, c, _)| s == source && c == counter)
        {
            Some((_, _, n)) => *n += 1,
            None => counts.push((source.to_string(), counter.to_string(), 1)),
        }
    });
}

/// The counts to flush, when `interval_ms` has passed since the last flush.
pub fn take_due(now: u64, interval_ms: u64) -> Option<Vec<(String, String, u64)>> {
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        if pending.counts.is_empty() || now.saturating_sub(pending.last_flush) < interval_ms {
            return None;
        }
        pending.last_flush = now;
        Some(std::mem::take(&mut pending.counts))
    })
}

/// Adds the counts to D1 in one batch. On failure they are logged and
/// dropped: telemetry is not worth a retry loop.
pub async fn flush(env: Env, counts: Vec<(String, String, u64)>) {
    let statements: Vec<Statement> = counts
        .iter()
        .map(|(source, counter, n)| {
            Statement::new(
                "INSERT INTO source_counters (source, counter, value) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (source, counter) DO UPDATE SET value = value + excluded.value",
                vec![
                    source.as_str().into(),
                    counter.as_str().into(),
                    (*n as i64).into(),
                ],
            )
        })
        .collect();
    let result = match Db::from_env(&env) {
        Ok(db) => db.batch(&statements).await,
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        log::error(
            &Line::new("stats_flush_failed")
                .counts(counts.len())
                .error(e),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_accumulate_and_flush_once_per_interval() {
        count("stripe", "received");
        count("stripe", "received");
        count("github", "rejected:bad_signature");
        assert_eq!(take_due(5, 10), None, "not due yet");
        let mut counts = take_due(10, 10).unwrap();
        counts.sort();
        assert_eq!(
            counts,
            vec![
                ("github".into(), "rejected:bad_signature".into(), 1),
                ("stripe".into(), "received".into(), 2),
            ]
        );
        assert_eq!(take_due(30, 10), None, "nothing left to flush");
        count("stripe", "duplicate");
        assert_eq!(take_due(15, 10), None, "5 ms after the last flush");
        assert_eq!(
            take_due(20, 10).unwrap(),
            vec![("stripe".into(), "duplicate".into(), 1)]
        );
    }
}
