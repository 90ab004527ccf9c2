//! What waits in an isolate's memory for D1, and when it goes: the counts
//! since the last flush, and the one delayed flush that takes a burst's
//! tail once the interval is over.

use std::cell::RefCell;

use super::{Counter, Counts, Series};

/// Counts not yet in D1, when they were last flushed (ms), and the delayed
/// flush waiting to take them, if any: its number and when it wakes.
#[derive(Default)]
struct Pending {
    counts: Counts,
    last_flush: u64,
    waiting: Option<(u64, u64)>,
    sleepers: u64,
}

thread_local! {
    static PENDING: RefCell<Pending> = RefCell::new(Pending::default());
}

/// Adds one to `source`'s `counter`.
pub fn count(source: &str, counter: Counter) {
    let counter = counter.name();
    PENDING.with(|pending| {
        let counts = &mut pending.borrow_mut().counts.totals;
        match counts
            .iter_mut()
            .find(|(s, c, _)| s == source && *c == counter)
        {
            Some((_, _, n)) => *n += 1,
            None => counts.push((source.to_string(), counter, 1)),
        }
    });
}

/// Adds one delivery to `source`'s `series` in the minute of `now_ms`.
pub fn count_trend(now_ms: i64, source: &str, series: Series) {
    let minute = now_ms.div_euclid(60_000);
    PENDING.with(|pending| {
        let trend = &mut pending.borrow_mut().counts.trend;
        match trend
            .iter_mut()
            .find(|(m, s, t, _)| *m == minute && s == source && *t == series)
        {
            Some((_, _, _, n)) => *n += 1,
            None => trend.push((minute, source.to_string(), series, 1)),
        }
    });
}

/// What to do with the counts after a delivery.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    /// Flush these now: the interval has passed since the last flush.
    Now(Counts),
    /// Start a delayed flush ([`super::flush_later`]), this one, sleeping this
    /// many ms: counts wait, and none is waiting for them yet, so that a
    /// burst's tail reaches D1 without another request.
    Later(Sleeper),
    /// Nothing to flush, or a delayed flush will take it.
    Nothing,
}

/// A delayed flush: its number (only the latest may flush), and how long
/// it sleeps first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sleeper {
    id: u64,
    pub sleep_ms: u64,
}

/// What a delayed flush does when it wakes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Wake {
    Flush(Counts),
    /// The interval has not passed since the last flush: sleep this long.
    Again(u64),
    /// Nothing to flush, or another flush took its place.
    Done,
}

/// The longest a delayed flush sleeps at once (ms): the runtime keeps a
/// request's `wait_until` work alive for 30 s after its response. With an
/// interval over 20 s, a tail may wait for the next request.
const SLEEP_MAX_MS: u64 = 20_000;

/// What is due, `interval_ms` after the last flush. A delayed flush that
/// should have woken long ago (its request's work was cut short) is
/// replaced.
pub fn take_due(now: u64, interval_ms: u64) -> Due {
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        if pending.counts.is_empty() {
            return Due::Nothing;
        }
        let since = now.saturating_sub(pending.last_flush);
        if since >= interval_ms {
            // A delayed flush still asleep finds it is no longer the one.
            pending.last_flush = now;
            pending.waiting = None;
            return Due::Now(std::mem::take(&mut pending.counts));
        }
        if pending
            .waiting
            .is_some_and(|(_, wakes)| now < wakes + SLEEP_MAX_MS)
        {
            return Due::Nothing;
        }
        pending.sleepers += 1;
        let sleeper = Sleeper {
            id: pending.sleepers,
            sleep_ms: (interval_ms - since).min(SLEEP_MAX_MS),
        };
        pending.waiting = Some((sleeper.id, now + sleeper.sleep_ms));
        Due::Later(sleeper)
    })
}

/// Delayed flush `sleeper`, awake at `now`: it flushes once the interval has
/// passed since the last flush, and only while it is the one waiting.
pub(super) fn wake(sleeper: Sleeper, now: u64, interval_ms: u64) -> Wake {
    let id = sleeper.id;
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        if pending.waiting.map(|(waiting, _)| waiting) != Some(id) {
            return Wake::Done;
        }
        if pending.counts.is_empty() {
            pending.waiting = None;
            return Wake::Done;
        }
        let since = now.saturating_sub(pending.last_flush);
        if since < interval_ms {
            let sleep_ms = (interval_ms - since).min(SLEEP_MAX_MS);
            pending.waiting = Some((id, now + sleep_ms));
            return Wake::Again(sleep_ms);
        }
        pending.waiting = None;
        pending.last_flush = now;
        Wake::Flush(std::mem::take(&mut pending.counts))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts `due` says to flush now.
    fn now(due: Due) -> Counts {
        match due {
            Due::Now(counts) => counts,
            other => panic!("not due now: {other:?}"),
        }
    }

    #[test]
    fn counts_accumulate_and_flush_once_per_interval() {
        count("beta", Counter::Received);
        count("beta", Counter::Received);
        count("alpha", Counter::Rejected("bad_signature"));
        let mut counts = now(take_due(10, 10));
        counts.totals.sort();
        assert_eq!(
            counts.totals,
            vec![
                ("alpha".into(), "rejected:bad_signature".into(), 1),
                ("beta".into(), "received".into(), 2),
            ]
        );
        assert_eq!(take_due(30, 10), Due::Nothing, "nothing left to flush");
        count("beta", Counter::Outcome("duplicate"));
        assert_eq!(
            later(take_due(15, 10)).sleep_ms,
            5,
            "5 ms after the last flush"
        );
        assert_eq!(
            now(take_due(20, 10)).totals,
            vec![("beta".into(), "duplicate".into(), 1)]
        );
    }

    /// The sleeper `due` starts.
    fn later(due: Due) -> Sleeper {
        match due {
            Due::Later(sleeper) => sleeper,
            other => panic!("no delayed flush: {other:?}"),
        }
    }

    #[test]
    fn a_bursts_tail_is_flushed_later_without_another_request() {
        count("gamma", Counter::Received);
        assert!(matches!(take_due(1_000, 0), Due::Now(_)));
        count("gamma", Counter::Received);
        let sleeper = later(take_due(1_004, 10));
        assert_eq!(sleeper.sleep_ms, 6, "until the interval is over");
        count("gamma", Counter::Received);
        assert_eq!(take_due(1_005, 10), Due::Nothing, "one waits already");
        let Wake::Flush(counts) = wake(sleeper, 1_010, 10) else {
            panic!("the interval is over: it flushes");
        };
        assert_eq!(counts.totals, vec![("gamma".into(), "received".into(), 2)]);
        assert_eq!(wake(sleeper, 1_011, 10), Wake::Done, "nothing waits");
    }

    #[test]
    fn a_delayed_flush_keeps_the_interval_and_only_the_latest_flushes() {
        const INTERVAL: u64 = 100_000;
        count("delta", Counter::Received);
        assert!(matches!(take_due(200_000, INTERVAL), Due::Now(_)));
        count("delta", Counter::Received);
        let first = later(take_due(200_001, INTERVAL));
        assert_eq!(
            first.sleep_ms, SLEEP_MAX_MS,
            "at most what wait_until allows"
        );
        assert_eq!(
            wake(first, 220_001, INTERVAL),
            Wake::Again(SLEEP_MAX_MS),
            "not before the interval is over"
        );
        assert_eq!(take_due(230_000, INTERVAL), Due::Nothing, "it still waits");
        // Its work was cut short: a request long after its wake-up replaces it.
        let second = later(take_due(260_001, INTERVAL));
        assert_ne!(second.id, first.id);
        assert_eq!(wake(first, 300_000, INTERVAL), Wake::Done, "replaced");
        assert!(matches!(wake(second, 300_000, INTERVAL), Wake::Flush(_)));
        // A flush on the request path retires the one asleep.
        count("delta", Counter::Received);
        let third = later(take_due(300_001, INTERVAL));
        assert!(matches!(take_due(400_001, INTERVAL), Due::Now(_)));
        assert_eq!(wake(third, 400_002, INTERVAL), Wake::Done);
    }
}
