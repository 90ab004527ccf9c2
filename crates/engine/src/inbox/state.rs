//! The event's state machine, as pure code: what an inbox's alarm does next,
//! what follows a failed attempt, when a finished event may be forgotten.
//! The object (`inbox/mod.rs`) does the I/O these decisions call for.
//!
//! ```text
//! received ──effect committed──────────────▶ done ──retention──▶ (forgotten)
//!    │  ▲                                      ▲
//!    │  └──a new copy, or a replay──┐          │ the ledger shows it applied
//!    └──retry budget spent──▶ failed ─────────┤ (after a report, or a dismissal)
//!                               └──dismissed──▶ dismissed ──retention──▶ (forgotten)
//! ```
//!
//! A `failed` event is kept until it is resolved; only `done` and
//! `dismissed` events are forgotten.

use crate::config::InboxSettings;
use crate::names::named_enum;

named_enum! {
    /// The state of an inbox's one event, as stored.
    pub enum EventState {
        /// Held; its effect has not committed yet (or is being attempted).
        Received = "received",
        /// The effect committed (or the ledger shows it did).
        Done = "done",
        /// The retry budget is spent; listed for operators.
        Failed = "failed",
        /// An operator decided not to apply it.
        Dismissed = "dismissed",
    }
}

named_enum! {
    /// What a delivery (or an operator's action) did, as the sender is told.
    pub enum Outcome {
        /// This copy was new and its effect committed.
        Processed = "processed",
        /// A copy of an event already held (in flight or done), or whose effect
        /// the ledger shows committed long ago, or a signed body already applied
        /// under another id. Nothing was done again.
        Duplicate = "duplicate",
        /// New and durably recorded, but the effect did not commit yet: the
        /// inbox's alarm retries it.
        Accepted = "accepted",
        /// A copy of a failed event reopened it, and its one more attempt failed
        /// too. The event is held, and listed for operators.
        Failed = "failed",
        /// An operator dismissed the failed event: it will not be applied.
        Dismissed = "dismissed",
    }
}

/// What the held event looks like to its alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub state: EventState,
    /// Whether `failed_events` lists it.
    pub reported: bool,
    /// When the first copy arrived (ms).
    pub received_at: i64,
    /// When it finished (ms), if it has.
    pub done_at: Option<i64>,
}

impl Held {
    /// When a finished event may be forgotten: retention counted from its
    /// arrival, or from when it finished if that was later (an outage).
    pub fn expires_at(&self, retention_ms: i64) -> i64 {
        let from = self
            .done_at
            .unwrap_or(self.received_at)
            .max(self.received_at);
        from + retention_ms
    }
}

/// What an alarm does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmTask {
    /// An attempt is running in this instance: look again later.
    WaitForAttempt,
    /// Try the effect again.
    Retry,
    /// List the failed event for operators (or look again in a retention).
    ReportFailure,
    /// Done, but still listed as failed: take it off the list first.
    ResolveReport,
    /// Finished, with nothing left to do.
    Rest(Rest),
}

/// What becomes of a finished event with nothing left to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    /// Past its retention: forget it.
    Forget,
    /// Sleep until the retention deadline (ms).
    SleepUntil(i64),
}

/// The alarm's task for the held event at `now` (ms). `attempt_running`:
/// whether this instance is inside an effect attempt.
pub fn alarm_task(held: &Held, attempt_running: bool, retention_ms: i64, now: i64) -> AlarmTask {
    match held.state {
        EventState::Received if attempt_running => AlarmTask::WaitForAttempt,
        EventState::Received => AlarmTask::Retry,
        EventState::Failed => AlarmTask::ReportFailure,
        EventState::Done if held.reported => AlarmTask::ResolveReport,
        EventState::Done | EventState::Dismissed => {
            AlarmTask::Rest(after_resolved(held, retention_ms, now))
        }
    }
}

/// For a finished event with nothing left to do: forget it, or sleep until
/// it may be.
pub fn after_resolved(held: &Held, retention_ms: i64, now: i64) -> Rest {
    let expires_at = held.expires_at(retention_ms);
    if now >= expires_at {
        Rest::Forget
    } else {
        Rest::SleepUntil(expires_at)
    }
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Retry in this many ms (jittered backoff).
    RetryIn(i64),
    /// The budget is spent: the event is `failed`.
    GiveUp,
}

/// After `failures` failed attempts so far: retry with backoff, or give up
/// once `EFFECT_MAX_ATTEMPTS` have failed.
/// The delay before the next try of an event waiting for its store: as
/// long as it has waited since `received_at`, between the retry base and
/// an hour.
pub fn waiting_ms(received_at: i64, settings: &InboxSettings) -> i64 {
    let waited = crate::clock::now_ms() - received_at;
    waited.clamp(settings.retry_base_ms, 60 * 60 * 1000)
}

pub fn after_failure(failures: i64, settings: &InboxSettings) -> AfterFailure {
    if failures >= settings.max_attempts {
        AfterFailure::GiveUp
    } else {
        AfterFailure::RetryIn(settings.backoff_ms(failures))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 24 * 60 * 60 * 1000;

    fn held(state: EventState, reported: bool, done_at: Option<i64>) -> Held {
        Held {
            state,
            reported,
            received_at: 1_000,
            done_at,
        }
    }

    #[test]
    fn states_are_stored_as_their_names() {
        let names: Vec<_> = EventState::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["received", "done", "failed", "dismissed"]);
        assert_eq!(EventState::from_name("sent"), None);
    }

    #[test]
    fn an_unfinished_event_is_retried_unless_an_attempt_runs() {
        let h = held(EventState::Received, false, None);
        assert_eq!(alarm_task(&h, false, DAY, 2_000), AlarmTask::Retry);
        assert_eq!(alarm_task(&h, true, DAY, 2_000), AlarmTask::WaitForAttempt);
    }

    #[test]
    fn a_failed_event_is_reported_and_never_forgotten() {
        let h = held(EventState::Failed, true, Some(1_000));
        assert_eq!(
            alarm_task(&h, false, DAY, 100 * DAY),
            AlarmTask::ReportFailure
        );
    }

    #[test]
    fn a_done_event_leaves_the_failed_list_before_it_is_forgotten() {
        let listed = held(EventState::Done, true, Some(5_000));
        assert_eq!(
            alarm_task(&listed, false, DAY, 2 * DAY),
            AlarmTask::ResolveReport
        );
        let unlisted = held(EventState::Done, false, Some(5_000));
        assert_eq!(
            alarm_task(&unlisted, false, DAY, 2 * DAY),
            AlarmTask::Rest(Rest::Forget)
        );
    }

    #[test]
    fn retention_counts_from_the_later_of_arrival_and_finish() {
        // Finished two days after arriving (an outage): kept a day from then.
        let late = held(EventState::Done, false, Some(1_000 + 2 * DAY));
        assert_eq!(late.expires_at(DAY), 1_000 + 3 * DAY);
        assert_eq!(
            alarm_task(&late, false, DAY, 1_000 + 2 * DAY + 1),
            AlarmTask::Rest(Rest::SleepUntil(1_000 + 3 * DAY))
        );
        let dismissed = held(EventState::Dismissed, false, None);
        assert_eq!(dismissed.expires_at(DAY), 1_000 + DAY);
        assert_eq!(
            alarm_task(&dismissed, false, DAY, 1_000 + DAY),
            AlarmTask::Rest(Rest::Forget)
        );
    }

    #[test]
    fn failures_back_off_until_the_budget_is_spent() {
        let settings = InboxSettings {
            retention_ms: DAY,
            retry_base_ms: 1_000,
            max_attempts: 3,
            store: crate::config::Store::D1,
        };
        match after_failure(2, &settings) {
            AfterFailure::RetryIn(ms) => assert!((1_000..=2_000).contains(&ms), "{ms}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(after_failure(3, &settings), AfterFailure::GiveUp);
        assert_eq!(after_failure(9, &settings), AfterFailure::GiveUp);
    }
}
