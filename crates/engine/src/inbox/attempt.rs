//! One try at an event's effect, and what follows it: the event marked
//! done, or the failure counted and the next retry armed, or — once the
//! budget is spent — the event marked failed and listed for operators.

use super::state::{self, AfterFailure, EventState, Held, Outcome};
use super::store::EventRow;
use super::{Answer, Inbox};
use crate::clock::now_ms;
use crate::config::{InboxSettings, Store};
use crate::effects::{self, Plan};
use crate::event::{dedupe_key, VerifiedEvent};
use crate::failed_events::{self, Recorded};
use crate::fault::Fault;
use crate::ledger::Applied;
use crate::log::{self, Line};
use crate::store::{self, NotApplied};
use crate::{handoff_rows, outbox};
use worker::{Response, Result};

/// How one effect attempt ended.
pub(super) enum Tried {
    /// Applied, and the event's progress as the attempt left it, when
    /// known without reading it again.
    Applied(Applied, Option<Held>),
    /// Failed; the alarm retries it.
    WillRetry,
    /// Failed because the store could not be reached, or lacks one of the
    /// engine's migrations (named); the alarm retries it in this many ms,
    /// and the sender is asked to come back then.
    Unavailable(i64, Option<&'static str>),
    /// Failed, and the budget is spent: the event is `failed`.
    GaveUp,
    /// Not applied: an operator's dismissal had committed (its reply lost).
    Dismissed,
}

impl Tried {
    pub(super) fn answer(self, source: &str) -> Answer {
        match self {
            Tried::Applied(Applied::Now, _) => Outcome::Processed.into(),
            Tried::Applied(Applied::Earlier, _) => Outcome::Duplicate.into(),
            Tried::Applied(Applied::Replayed { of }, _) => Answer {
                outcome: Outcome::Duplicate,
                replayed_body_of: Some(dedupe_key(source, &of)),
                recorded: false,
                retry_after_s: None,
                missing_migration: None,
            },
            Tried::WillRetry => Outcome::Accepted.into(),
            Tried::Unavailable(retry_in_ms, behind) => Answer {
                retry_after_s: Some(((retry_in_ms + 999) / 1_000).max(1)),
                missing_migration: behind.map(str::to_string),
                ..Outcome::Accepted.into()
            },
            Tried::GaveUp => Outcome::Failed.into(),
            // Handled earlier, by the operator: to a sender, a duplicate.
            Tried::Dismissed => Outcome::Duplicate.into(),
        }
    }
}

/// What a call to the inbox leaves: its reply and, for a first delivery
/// answered once recorded (`REPLY_AFTER = "record"`), the effect to apply
/// after it.
pub(super) struct Received {
    pub reply: Response,
    pub after_reply: Option<AfterReply>,
}

impl From<Response> for Received {
    fn from(reply: Response) -> Self {
        Received {
            reply,
            after_reply: None,
        }
    }
}

/// A first delivery's effect, left to run after its reply.
pub(super) struct AfterReply {
    pub event: VerifiedEvent,
    pub fault: Option<Fault>,
    pub planned: Planned,
}

/// The effect an attempt applies: as the first delivery planned it, or
/// planned again from the stored body, with the fault (tests only) the
/// event was stored with, so that a retry plans what the first try did.
pub(super) enum Planned {
    First(Plan),
    FromStore(Option<Fault>),
}

impl Inbox {
    /// The first attempt of an event answered once recorded, as the first
    /// delivery would have made it, after the reply. Should this instance
    /// die first, the alarm armed with the claim applies the effect.
    pub(super) async fn apply_after_reply(&self, after_reply: AfterReply) {
        let AfterReply {
            event,
            fault,
            planned,
        } = after_reply;
        let key = event.key();
        if fault == Some(Fault::CrashAfterReply) {
            self.effect_running.set(false);
            log::error(&Line::new("effect_after_reply_lost").key(&key));
            return;
        }
        // Read before the reply, by this instance: it cannot fail here.
        let Ok(settings) = self.settings() else {
            self.effect_running.set(false);
            return;
        };
        match self.attempt_effect(event, fault, settings, planned).await {
            Ok(Tried::Applied(_, progress)) => {
                self.rest_after_success(progress, settings.retry_base_ms, settings)
                    .await
            }
            Ok(_) => {}
            Err(e) => log::error(&Line::new("effect_after_reply_failed").key(&key).error(e)),
        }
    }

    /// One try at the effect. On success marks the event done; on failure
    /// records the error and arms the next retry, or marks the event failed
    /// once the budget is spent and reports it. `fault` is this attempt's,
    /// for tests (see [`Fault`]).
    pub(super) async fn attempt_effect(
        &self,
        event: VerifiedEvent,
        fault: Option<Fault>,
        settings: &InboxSettings,
        plan: Planned,
    ) -> Result<Tried> {
        // Only the first delivery's attempt comes with a plan; any other
        // (an alarm's retry, a reopening copy, a replay) may follow a
        // failure report whose `reported` mark was never set.
        let after_first = matches!(plan, Planned::FromStore(_));
        self.effect_running.set(true);
        let result = self.run_effect(&event, fault, plan, settings.store).await;
        // The ledger row may be an operator's dismissal whose reply was lost
        // (the event then went back to `failed`, and a copy reopened it):
        // then it was never applied. Asked of D1 while still running, so
        // that neither the alarm nor a replay starts another attempt.
        let dismissed = match &result {
            Ok(Applied::Earlier) if after_first => {
                failed_events::dismissed(&self.env, settings.store, &event).await
            }
            _ => Ok(false),
        };
        self.effect_running.set(false);
        let error = match result {
            Ok(applied) => {
                let replay_of = match &applied {
                    Applied::Replayed { of } => Some(of.clone()),
                    _ => None,
                };
                if dismissed? {
                    self.store.dismiss(EventState::Received, now_ms())?;
                    log::warn(&Line::new("event_dismissed").key(&event.key()));
                    return Ok(Tried::Dismissed);
                }
                if let Some(of) = &replay_of {
                    let key = event.key();
                    let line = Line::new("replayed_body").key(&key);
                    log::warn(&line.duplicate_of(dedupe_key(&event.source, of)));
                }
                let progress = self.store.mark_done(now_ms(), replay_of)?;
                if after_first || progress.is_some_and(|held| held.reported) {
                    // Perhaps listed as failed before this attempt, whatever
                    // `reported` says (a report's reply lost, or the event
                    // reopened while it was awaited): no longer. Marked
                    // first, so that if D1 refuses the alarm tries again.
                    self.store.set_reported(true)?;
                    self.resolve_report(&event).await;
                    // Awaited: read again.
                    return Ok(Tried::Applied(applied, None));
                }
                return Ok(Tried::Applied(applied, progress));
            }
            Err(error) => error,
        };
        let unavailable = !matches!(error, NotApplied::Failed(_));
        let waits = matches!(error, NotApplied::Unreachable(_) | NotApplied::Behind(_));
        let behind = match &error {
            NotApplied::Behind(behind) => Some(behind.migration.name),
            _ => None,
        };
        let error = error.message();
        let Some(failures) = self.store.record_failure(&error, !waits)? else {
            // Not an attempt at a pending event (an operator's replay of a
            // finished one): nothing changed.
            return Err(format!("replay failed, the event is unchanged: {error}").into());
        };
        // A store that cannot be reached spends no attempt: the event waits
        // for it, retried after as long as it has waited so far (a doubling
        // delay), up to an hour. One that is behind waits a minute at most:
        // an operator applying the migration expects the events to follow.
        let next = match (waits, behind) {
            (true, None) => AfterFailure::RetryIn(state::waiting_ms(event.received_at, settings)),
            (true, Some(_)) => {
                AfterFailure::RetryIn(state::waiting_ms(event.received_at, settings).min(60_000))
            }
            (false, _) => state::after_failure(failures, settings),
        };
        // A store that is behind said so once, as `store_behind`.
        if behind.is_none() {
            let key = event.key();
            let line = Line::new("effect_failed").key(&key).attempt(failures);
            log::error(&line.last(next == AfterFailure::GiveUp).error(&error));
        }
        if let AfterFailure::RetryIn(delay_ms) = next {
            self.set_alarm_in(delay_ms).await?;
            return Ok(match unavailable {
                true => Tried::Unavailable(delay_ms, behind),
                false => Tried::WillRetry,
            });
        }
        self.store
            .transition(EventState::Received, EventState::Failed)?;
        let row = self.store.load()?.ok_or("inbox row vanished")?;
        self.report_failure(&row, settings).await?;
        // The report may have found the effect in the ledger after all (an
        // attempt whose reply was lost): then it is done.
        Ok(match self.store.state()? {
            Some(EventState::Done) => Tried::Applied(Applied::Earlier, None),
            _ => Tried::GaveUp,
        })
    }

    /// Lists a failed event in `failed_events` unless it is already, and
    /// arms the alarm: to try the report again if D1 refused it, else to
    /// look again in a retention period (a failed event is never forgotten).
    pub(super) async fn report_failure(
        &self,
        row: &EventRow,
        settings: &InboxSettings,
    ) -> Result<()> {
        if row.reported {
            return self.set_alarm_in(settings.retention_ms).await;
        }
        let error = row.last_error.as_deref().unwrap_or("unknown");
        let written = if Fault::d1_down(row.fault, now_ms()) {
            Err("injected fault: D1 unavailable".into())
        } else {
            let written = failed_events::record(&self.env, &self.engine, &row.event, error).await;
            match row.fault {
                Some(Fault::ReportLate(_)) => {
                    worker::Delay::from(std::time::Duration::from_secs(3)).await;
                    written
                }
                Some(Fault::ReportReplyLost(_, until)) if now_ms() < until => {
                    written.and(Err("injected fault: the report's reply is lost".into()))
                }
                _ => written,
            }
        };
        // D1 was awaited: a copy or an operator may have moved the event on
        // meanwhile (reopened it, dismissed it). Then this report is moot,
        // and the alarm is theirs to set.
        if self.store.state()? != Some(EventState::Failed) {
            return Ok(());
        }
        match written {
            Ok(Recorded::Listed) => {
                self.store.set_reported(true)?;
                self.set_alarm_in(settings.retention_ms).await
            }
            Ok(Recorded::AlreadyHandled) => self.settle_handled(row, settings).await,
            Err(e) => self.retry_report(row, settings, e).await,
        }
    }

    /// The report found the ledger holding the event: an operator's
    /// dismissal committed whose reply was lost, or its effect committed
    /// after all (a lost reply). Which, D1 says; meanwhile a copy may have
    /// moved the event on.
    async fn settle_handled(&self, row: &EventRow, settings: &InboxSettings) -> Result<()> {
        let dismissed = failed_events::dismissed(&self.env, settings.store, &row.event).await;
        if self.store.state()? != Some(EventState::Failed) {
            return Ok(());
        }
        match dismissed {
            Ok(true) => {
                self.store.dismiss(EventState::Failed, now_ms())?;
                return self.set_alarm_in(settings.retention_ms).await;
            }
            Ok(false) => {}
            Err(e) => return self.retry_report(row, settings, e).await,
        }
        // Applied: nothing is owed. It is done, and no longer listed, should
        // an earlier report whose reply was lost have listed it; if D1
        // refuses that, the alarm tries again.
        self.store
            .settle_as_done(EventState::Failed, Some(now_ms()))?;
        self.store.set_reported(true)?;
        let next = if self.resolve_report(&row.event).await {
            settings.retention_ms
        } else {
            settings.backoff_ms(row.effect_attempts.max(1))
        };
        self.set_alarm_in(next).await
    }

    /// D1 did not take the report (or did not answer): logged, and the
    /// alarm tries again after a backoff.
    async fn retry_report(
        &self,
        row: &EventRow,
        settings: &InboxSettings,
        error: worker::Error,
    ) -> Result<()> {
        log::error(
            &Line::new("failure_report_failed")
                .key(&row.event.key())
                .error(error),
        );
        let retry = settings.backoff_ms(row.effect_attempts.max(1));
        self.set_alarm_in(retry).await
    }

    async fn run_effect(
        &self,
        event: &VerifiedEvent,
        fault: Option<Fault>,
        plan: Planned,
        store: Store,
    ) -> std::result::Result<Applied, NotApplied> {
        let failed = |why: &str| NotApplied::Failed(why.into());
        if matches!(
            fault,
            Some(Fault::FailBeforeEffect | Fault::EffectAlwaysFails)
        ) {
            return Err(failed("injected fault: before effect"));
        }
        if Fault::d1_down(fault, now_ms()) || Fault::effect_down(fault, now_ms()) {
            return Err(failed("injected fault: D1 unavailable"));
        }
        let plan = match plan {
            Planned::First(plan) => plan,
            Planned::FromStore(stored) => {
                let app = crate::app::get().ok_or(failed(crate::app::NOT_STARTED))?;
                effects::plan(app.effects, event, now_ms(), stored)
                    .map_err(|e| failed(&format!("unplannable event: {e}")))?
            }
        };
        let (applied, owed) = store::apply(&self.env, store, event, &plan.batch).await?;
        if fault == Some(Fault::FailAfterEffect) {
            return Err(failed("injected fault: after effect committed"));
        }
        if matches!(applied, Applied::Replayed { .. }) {
            // This id's outbox rows were never written: nothing to send.
            return Ok(applied);
        }
        // After the commit, never before: a message must not outrun its row.
        // Also after `Earlier`: that attempt's send may be what was lost.
        let sent = if fault == Some(Fault::FailEnqueue) {
            Err("injected fault: enqueue".into())
        } else {
            let (keys, ids) = (&plan.outbox_keys, &plan.forward_ids);
            outbox::send_after_commit(&self.env, keys, ids, &owed, fault).await
        };
        if let Err(e) = sent {
            // Nothing is lost: the rows are committed as pending, and the
            // cron relay sends them after its grace period, once in D1.
            log::error(&Line::new("enqueue_failed").key(&event.key()).error(e));
            if fault != Some(Fault::NoHandOffCopy) {
                handoff_rows::deliver(&self.env, &owed).await;
            }
        }
        Ok(applied)
    }

    /// Takes a done event off the failed list; clears `reported` once D1
    /// has. A refusal is logged, and the alarm tries again.
    pub(super) async fn resolve_report(&self, event: &VerifiedEvent) -> bool {
        match failed_events::resolve(&self.env, &event.source, &event.id).await {
            Ok(()) => self.store.set_reported(false).is_ok(),
            Err(e) => {
                log::error(
                    &Line::new("failed_event_unresolved")
                        .key(&event.key())
                        .error(e),
                );
                false
            }
        }
    }
}
