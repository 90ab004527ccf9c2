//! `EventInbox`: one Durable Object per `"{source}:{event id}"`.
//!
//! The runtime runs one instance per name, so every delivery of an event —
//! sequential retries or a storm of concurrent ones — meets in the same
//! object. The object decides "new or duplicate" with synchronous SQL
//! ([`store`]): there is no `.await` between reading and writing the claim,
//! so no other request can run in between (an `.await` on D1 or `fetch`
//! would open the door).
//!
//! The object is the durable inbox, not the record of truth: the effect's
//! ledger row in D1 is. If the object's "done" mark is lost after the effect
//! committed, the retry finds the ledger row and counts that as success.
//!
//! - [`state`]: the event's state machine, pure and host-tested;
//! - [`store`]: the rows and statements, on the tables `schema.rs` makes;
//! - `attempt.rs`: one try at the effect, and what follows it;
//! - `actions.rs`: what operators ask of it (its state, a replay, a dismissal);
//! - [`client`]: how the worker and the admin API call an inbox.
//!
//! An alarm is set while the event row exists, on every path: armed at the
//! claim before the first attempt; re-armed by the alarm itself, first
//! thing, as a fallback before anything in it can fail; then set to the
//! next retry, the next try at reporting a failure to `failed_events`, or
//! the retention deadline.

mod actions;
mod attempt;
pub mod client;
mod deliveries;
mod fixtures;
mod schema;
pub mod state;
pub mod store;

use std::cell::Cell;

use worker::wasm_bindgen;
use worker::{durable_object, DurableObject, Env, Method, Request, Response, Result, State};

use self::attempt::{Planned, Tried};
use self::client::{Answer, Handoff, BAD_HANDOFF, NOT_STORED, UNPLANNABLE};
use self::state::{AlarmTask, EventState, Held, Outcome, Rest};
use self::store::{Claim, EventRow, Store};
use crate::clock::now_ms;
use crate::config::{ConfigError, InboxSettings, EFFECT_MAX_RETRY_DELAY_MS};
use crate::effects;
use crate::event::VerifiedEvent;
use crate::fault::Fault;
use crate::log::{self, Line};

/// The fallback an alarm arms before doing anything that could fail.
const FALLBACK_ALARM_MS: i64 = 60_000;

#[durable_object]
pub struct EventInbox {
    state: State,
    env: Env,
    store: Store,
    /// Parsed once per instance; a bad variable fails every call, by name.
    settings: std::result::Result<InboxSettings, ConfigError>,
    /// Whether this instance is inside an effect attempt right now. An
    /// attempt can only be in flight in the live instance, so memory is the
    /// right place; it keeps the alarm from racing a delivery's own attempt
    /// (harmless thanks to the ledger, but wasted work).
    effect_running: Cell<bool>,
}

impl DurableObject for EventInbox {
    fn new(state: State, env: Env) -> Self {
        let store = Store::new(state.storage().sql());
        let settings = InboxSettings::from_env(&env);
        log::configure(&env);
        EventInbox {
            state,
            env,
            store,
            settings,
            effect_running: Cell::new(false),
        }
    }

    /// The paths [`client`] calls.
    async fn fetch(&self, mut req: Request) -> Result<Response> {
        match (req.method(), req.path().as_str()) {
            (Method::Post, client::DELIVER) => {
                let url = req.inner().url();
                let query = url.split_once('?').map_or("", |(_, query)| query);
                // Bytes, then UTF-8: `text()` may drop a leading BOM, and the
                // body must stay exactly as signed.
                let body = String::from_utf8(req.bytes().await?)
                    .map_err(|_| "handoff: the body is not UTF-8".to_string());
                match body.and_then(|body| Handoff::from_parts(query, body)) {
                    Ok(handoff) => self.receive(handoff).await,
                    Err(e) => Response::error(e, BAD_HANDOFF),
                }
            }
            (Method::Get, client::STATE) => match self.inbox_state().await? {
                Some(state) => Response::from_json(&state),
                None => Response::error("no event", 404),
            },
            (Method::Get, client::BODY) => self.body(),
            (Method::Post, client::REPLAY) => match self.replay().await? {
                Some(answer) => Response::from_json(&answer),
                None => Response::error("no event", 404),
            },
            (Method::Post, client::DISMISS) => self.dismiss().await,
            _ => Response::error("not found", 404),
        }
    }

    /// The safety net: retries an unfinished effect, retries the report of a
    /// failed one, or forgets a finished event once its retention has passed.
    async fn alarm(&self) -> Result<Response> {
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
}

impl EventInbox {
    fn settings(&self) -> Result<&InboxSettings> {
        self.settings.as_ref().map_err(|e| e.clone().into())
    }

    /// The body, and what forwarding sends with it (see [`client::BODY`]).
    #[inline(never)]
    fn body(&self) -> Result<Response> {
        let Some(row) = self.store.load()? else {
            return Response::error("no event", 404);
        };
        let headers = worker::Headers::new();
        let forward = row.event.forward.as_deref().unwrap_or("{}");
        headers.set(client::FORWARD, forward)?;
        Ok(Response::ok(row.event.body)?.with_headers(headers))
    }

    /// A finished event with nothing left to do: forgotten, or left to
    /// sleep until it may be.
    async fn rest(&self, rest: Rest) -> Result<Response> {
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

    async fn receive(&self, handoff: Handoff) -> Result<Response> {
        let Handoff {
            event,
            verified,
            fault,
        } = handoff;
        let settings = self.settings()?;

        // The plan and the claim, in one synchronous step: no other request
        // can run in between, and the writes are durable before the reply
        // leaves (the output gate holds it). The effect is planned here,
        // once, for a new event only: a copy never parses the body for its
        // effect. One that cannot be planned would fail every retry: it is
        // refused before anything is stored, while the sender can see why.
        let older = matches!(fault, Some(Fault::OlderTables | Fault::InterruptedUpgrade));
        if older && self.store.stored_state()?.is_none() {
            let interrupted = fault == Some(Fault::InterruptedUpgrade);
            self.store.make_older_tables(&event, interrupted)?;
        }
        let stored = self.store.stored_state()?;
        let plan = match stored {
            Some(_) => None,
            None => match effects::plan(&event, now_ms(), fault) {
                Ok(plan) => Some(plan),
                Err(e) => return Response::error(e.to_string(), UNPLANNABLE),
            },
        };
        // If the claim fails, nothing was stored, and the worker may say so.
        let claim = if fault == Some(Fault::FailClaim) {
            Err("injected fault: claim".into())
        } else if let Some(stored) = stored {
            let state = EventState::from_name(&stored).ok_or("inbox row: unreadable state".into());
            state.and_then(|state| {
                let copy = self.store.log_copy(&event, now_ms(), verified.as_ref());
                copy.map(|()| Claim::Held(state))
            })
        } else {
            let first = self.store.claim_first(&event, fault, verified.as_ref());
            first.map(|()| Claim::First)
        };
        let claim = match claim {
            Ok(claim) => claim,
            Err(e) => {
                log::error(&Line::new("claim_failed").key(&event.key()).error(e));
                return Response::error("not stored", NOT_STORED);
            }
        };
        let answer = match claim {
            Claim::First => {
                // Armed before the first attempt, so a crash from here on is
                // retried. Should arming fail, the attempt goes ahead: it
                // arms the alarm again, for its retry or for retention. The
                // fault stops here instead, as a crash would: then the
                // sender's retry, a copy, arms it (`ensure_alarm`).
                if fault == Some(Fault::CrashBeforeArming) {
                    return Err("injected fault: a crash before arming the alarm".into());
                }
                let armed = if fault == Some(Fault::FailSetAlarm) {
                    Err("injected fault: setting the alarm".into())
                } else {
                    self.set_alarm_in(settings.retry_base_ms).await
                };
                if let Err(e) = armed {
                    log::error(&Line::new("alarm_not_set").key(&event.key()).error(e));
                }
                if fault == Some(Fault::LoseReply) {
                    return Err("injected fault: the reply is lost".into());
                }
                let source = event.source.clone();
                let planned = plan.map_or(Planned::FromStore(fault), Planned::First);
                let tried = self.attempt_effect(event, fault, settings, planned).await?;
                if let Tried::Applied(_, progress) = &tried {
                    // Moved to the retention deadline with the effect's own
                    // writes, so the object is not woken again just to find
                    // the event done.
                    self.rest_after_success(*progress, settings.retry_base_ms, settings)
                        .await;
                }
                tried.answer(&source)
            }
            // A new copy of a failed event reopens it for one more attempt:
            // a merchant's "resend" after an outage is answered by applying it.
            Claim::Held(EventState::Failed) => self.reopen(settings).await?,
            Claim::Held(state) => {
                self.ensure_alarm(&event, state, settings).await?;
                Outcome::Duplicate.into()
            }
        };
        Response::from_json(&answer)
    }

    /// For a copy: while the event row exists an alarm must be set, and
    /// for an unfinished event, within the longest retry delay. One is
    /// missing (or a retention away) only if arming it failed after the
    /// claim or a reopening; the alarm armed now finds what is left to do.
    /// Should this fail too, the copy's reply is an error, and the sender
    /// retries.
    async fn ensure_alarm(
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

    /// One more attempt at a failed event for a new copy of it.
    async fn reopen(&self, settings: &InboxSettings) -> Result<Answer> {
        self.reopen_failed(settings).await?;
        let row = self.store.load()?.ok_or("inbox row vanished")?;
        let fault = row.pending_fault();
        self.retry_now(row, fault, settings).await
    }

    /// Marks a `failed` event `received` synchronously, so that copies
    /// arriving meanwhile are duplicates of the attempt about to run, and
    /// arms a near alarm, so that the attempt is retried if this instance
    /// dies during it (the alarm left by the failure is a retention away).
    async fn reopen_failed(&self, settings: &InboxSettings) -> Result<()> {
        self.store
            .transition(EventState::Failed, EventState::Received)?;
        self.set_alarm_in(settings.retry_base_ms).await
    }

    /// An attempt off the first delivery's path (the alarm, a reopening
    /// copy, a replay): on success the alarm moves to the retention
    /// deadline, counted from now, when the event finished.
    async fn retry_now(
        &self,
        row: EventRow,
        fault: Option<Fault>,
        settings: &InboxSettings,
    ) -> Result<Answer> {
        let source = row.event.source.clone();
        let backoff = settings.backoff_ms(row.effect_attempts.max(1));
        let planned = Planned::FromStore(row.fault);
        let tried = self
            .attempt_effect(row.event, fault, settings, planned)
            .await?;
        if let Tried::Applied(_, progress) = &tried {
            self.rest_after_success(*progress, backoff, settings).await;
        }
        Ok(tried.answer(&source))
    }

    /// After an attempt that applied the effect: the next wake-up is the
    /// retention deadline, counted from when the event finished (a replay of
    /// an event done long ago does not push it back) — or, while the event
    /// is still listed as failed (D1 refused the resolve), a retry of that
    /// after `backoff_ms`. `progress`: the event's, as the attempt left it,
    /// if known without reading it again. Should setting the alarm fail,
    /// the alarm already armed (a retry's) stays and finds the event done:
    /// the effect's answer is not turned into an error.
    async fn rest_after_success(
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
