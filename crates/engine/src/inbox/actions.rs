//! What operators ask of an inbox through the admin API and the dashboard:
//! the event's state with its deliveries, a replay, a dismissal.

use worker::{Response, Result};

use super::client::{Answer, InboxState};
use super::state::{EventState, Outcome};
use super::store::{DeliveryKind, LoggedDelivery};
use super::Inbox;
use crate::clock::now_ms;
use crate::event::{self, dedupe_key};
use crate::failed_events;
use crate::fault::Fault;
use crate::ledger::Applied;
use crate::log::{self, Line};

impl Inbox {
    /// An operator's replay: runs the effect path again for the held event,
    /// without test faults. A `failed` event is reopened first. For an event
    /// already done it is a no-op: the ledger answers `Earlier`, reported as
    /// `duplicate`. `None` when the inbox holds no event (never, or expired).
    pub(super) async fn replay(&self) -> Result<Option<Answer>> {
        let Some(row) = self.store.held()? else {
            return Ok(None);
        };
        if row.state == EventState::Dismissed {
            return Ok(Some(Outcome::Dismissed.into()));
        }
        if self.effect_running.get() {
            return Ok(Some(Outcome::Accepted.into()));
        }
        let settings = self.settings()?;
        if row.state == EventState::Failed {
            self.reopen_failed(settings).await?;
        }
        let answer = self.retry_now(row, None, settings).await?;
        // An earlier dismissal whose reply was lost, found by this replay:
        // it says so, not "already applied".
        if self.store.state()? == Some(EventState::Dismissed) {
            return Ok(Some(Outcome::Dismissed.into()));
        }
        Ok(Some(answer))
    }

    /// An operator's decision not to apply a failed event. The state moves
    /// first, synchronously, so that a copy arriving while D1 records the
    /// decision is a duplicate, not a reopening. D1 records it as handled in
    /// the ledger, so no later copy applies it, even after this inbox
    /// forgets. Should the ledger show the effect committed after all (a
    /// lost reply, or the same body under another id), there is nothing to
    /// dismiss: the event is done, and the answer says `duplicate`.
    pub(super) async fn dismiss(&self) -> Result<Response> {
        let Some(row) = self.store.held()? else {
            return Response::error("no event", 404);
        };
        if row.state != EventState::Failed {
            return Response::error("only a failed event can be dismissed", 409);
        }
        let settings = self.settings()?;
        self.store.dismiss(EventState::Failed, now_ms())?;
        let error = row.last_error.as_deref().unwrap_or("unknown");
        let recorded = failed_events::dismiss(&self.env, settings.store, &row.event, error).await;
        let recorded = match row.fault {
            Some(Fault::DismissReplyLost(_)) => {
                recorded.and(Err("injected fault: the dismissal's reply is lost".into()))
            }
            _ => recorded,
        };
        let outcome = match recorded {
            Ok(Applied::Now) => {
                log::warn(&Line::new("event_dismissed").key(&row.event.key()));
                Outcome::Dismissed
            }
            Ok(_) => {
                self.store.settle_as_done(EventState::Dismissed, None)?;
                Outcome::Duplicate
            }
            Err(e) => {
                // Unknown whether D1 committed (its reply may be what was
                // lost): back to failed and unreported, and the alarm's
                // report, which checks the ledger first, settles it soon.
                self.store.undo_dismissal()?;
                self.set_alarm_in(settings.retry_base_ms).await?;
                return Err(e);
            }
        };
        self.set_alarm_in(settings.retention_ms).await?;
        Response::from_json(&Answer::from(outcome))
    }

    /// The event's progress and its deliveries, without creating tables in
    /// an object that never held an event (or has forgotten it).
    pub(super) async fn inbox_state(&self) -> Result<Option<InboxState>> {
        let Some(row) = self.store.held()? else {
            return Ok(None);
        };
        let first = LoggedDelivery {
            at: row.event.received_at,
            kind: match row.replay_of {
                Some(_) => DeliveryKind::ReplayedBody,
                None => DeliveryKind::First,
            },
            duplicate_of: row
                .replay_of
                .as_deref()
                .map(|of| dedupe_key(&row.event.source, of)),
            bytes: row.event.body.len() as i64,
            sha256: event::sha256_hex(row.event.body.as_bytes()),
            verified: row.verified.clone(),
        };
        let (later, mut delivery_log) = self.store.later_deliveries()?;
        delivery_log.insert(0, first);
        Ok(Some(InboxState {
            state: row.state,
            effect_attempts: row.effect_attempts,
            last_error: row.last_error,
            received_at: row.event.received_at,
            done_at: row.done_at,
            reported: row.reported,
            deliveries: later + 1,
            delivery_log,
            // Only informative: the state is shown without it if it fails.
            next_wake_up_at: self.state.storage().get_alarm().await.ok().flatten(),
            body: row.event.body,
            verified: row.verified,
        }))
    }
}
