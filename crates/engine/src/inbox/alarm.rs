//! When the object wakes, and when it will next: the alarm, the safety
//! net that retries, reports and forgets, and every place that arms it.

use worker::{Response, Result};

use super::state::{self, AlarmTask, EventState, Held, Rest};
use super::Inbox;
use crate::clock::now_ms;
use crate::config::{InboxSettings, EFFECT_MAX_RETRY_DELAY_MS};
use crate::event::VerifiedEvent;
use crate::log::{self, Line};

/// The fallback an alarm arms before doing anything that could fail.
const FALLBACK_ALARM_MS: i64 = 60_000;

impl Inbox {
    /// The safety net: retries an unfinished effect, retries the report of a
    /// failed one, or forgets a finished event once its retention has passed.
    pub(super) async fn alarm(&self) -> Result<Response> {
        // First, before anything below can fail: whatever happens, this
        // object is called again.
        self.set_alarm_in(FALLBACK_ALARM_MS).await?;
        let Some(row) = self.store.held()? else {
            self.state.storage().delete_alarm().await?;
            return Response::ok("empty");
        };
        let settings = self.settings()?;
        let running = self.effect_running.get();
        match state::alarm_task(&row.held(), running, settings.retention_ms, now_ms()) {
            AlarmTask::WaitForAttempt => {
                self.set_alarm_in(settings.retry_base_ms).await?;
                Response::ok("attempt in flight")
            }
            AlarmTask::Retry => {
                let fault = row.pending_fault();
                self.retry_now(row, fault, settings).await?;
                Response::ok("retried")
            }
            AlarmTask::ReportFailure => {
                self.report_failure(&row, settings).await?;
                Response::ok("failure reported")
            }
            AlarmTask::ResolveReport if self.resolve_report(&row.event).await => {
                let rest = state::after_resolved(&row.held(), settings.retention_ms, now_ms());
                self.rest(rest).await
            }
            AlarmTask::ResolveReport => {
                self.set_alarm_in(settings.backoff_ms(row.effect_attempts.max(1)))
                    .await?;
                Response::ok("failure report still to resolve")
            }
            AlarmTask::Rest(rest) => self.rest(rest).await,
        }
    }

    /// A finished event with nothing left to do: forgotten, or left to
    /// sleep until it may be.
    pub(super) async fn rest(&self, rest: Rest) -> Result<Response> {
        match rest {
            Rest::SleepUntil(at) => {
                self.set_alarm_in((at - now_ms()).max(0)).await?;
                Response::ok("rescheduled")
            }
            Rest::Forget => {
                // Storage first: should deleting it fail, the alarm stays.
                let storage = self.state.storage();
                storage.delete_all().await?;
                // Whether or not the alarm goes: the tables are gone. Not
                // before: a copy arriving meanwhile must not claim a new
                // event whose alarm this would then delete.
                let alarm = storage.delete_alarm().await;
                self.store.forget();
                alarm?;
                Response::ok("expired")
            }
        }
    }

    /// For a copy: while the event row exists an alarm must be set, and
    /// for an unfinished event, within the longest retry delay. One is
    /// missing (or a retention away) only if arming it failed after the
    /// claim or a reopening; the alarm armed now finds what is left to do.
    /// Should this fail too, the copy's reply is an error, and the sender
    /// retries.
    pub(super) async fn ensure_alarm(
        &self,
        event: &VerifiedEvent,
        state: EventState,
        settings: &InboxSettings,
    ) -> Result<()> {
        let latest = match state {
            EventState::Received => {
                now_ms() + EFFECT_MAX_RETRY_DELAY_MS.max(settings.retry_base_ms)
            }
            _ => i64::MAX,
        };
        let alarm = self.state.storage().get_alarm().await?;
        if alarm.is_some_and(|at| at <= latest) {
            return Ok(());
        }
        log::warn(&Line::new("alarm_rearmed").key(&event.key()));
        self.set_alarm_in(settings.retry_base_ms).await
    }

    /// After an attempt that applied the effect: the next wake-up is the
    /// retention deadline, counted from when the event finished (a replay of
    /// an event done long ago does not push it back) — or, while the event
    /// is still listed as failed (D1 refused the resolve), a retry of that
    /// after `backoff_ms`. `progress`: the event's, as the attempt left it,
    /// if known without reading it again. Should setting the alarm fail,
    /// the alarm already armed (a retry's) stays and finds the event done:
    /// the effect's answer is not turned into an error.
    pub(super) async fn rest_after_success(
        &self,
        progress: Option<Held>,
        backoff_ms: i64,
        settings: &InboxSettings,
    ) {
        let progress = match progress {
            Some(held) => Ok(Some(held)),
            None => self.store.progress(),
        };
        let next = match progress {
            Ok(Some(held)) if held.reported => Ok(backoff_ms),
            Ok(Some(held)) => Ok(held.expires_at(settings.retention_ms) - now_ms()),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        let set = match next {
            Ok(delay_ms) => self.set_alarm_in(delay_ms.max(0)).await,
            Err(e) => Err(e),
        };
        if let Err(e) = set {
            log::error(&Line::new("alarm_not_moved").error(e));
        }
    }

    pub(super) async fn set_alarm_in(&self, delay_ms: i64) -> Result<()> {
        self.state.storage().set_alarm(delay_ms).await
    }
}
