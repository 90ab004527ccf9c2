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
//! - `alarm.rs`: the alarm, and every place that arms it;
//! - `actions.rs`: what operators ask of it (its state, a replay, a dismissal);
//! - [`client`]: how the worker and the admin API call an inbox, with
//!   `handoff.rs`, the format of a delivery handed over.
//!
//! A first delivery is answered once its effect is applied, or — with
//! `REPLY_AFTER = "record"` — once it is claimed and its alarm armed; the
//! effect then runs after the reply, and the alarm covers a crash meanwhile.
//!
//! An alarm is set while the event row exists, on every path: armed at the
//! claim before the first attempt; re-armed by the alarm itself, first
//! thing, as a fallback before anything in it can fail; then set to the
//! next retry, the next try at reporting a failure to `failed_events`, or
//! the retention deadline.

mod actions;
mod alarm;
mod attempt;
pub mod client;
mod deliveries;
mod fixtures;
mod handoff;
mod schema;
pub mod state;
pub mod store;

use std::cell::Cell;
use std::rc::Rc;

use worker::wasm_bindgen;
use worker::{durable_object, DurableObject, Env, Method, Request, Response, Result, State};

use self::attempt::{AfterReply, Planned, Received, Tried};
use self::client::{Answer, Handoff, BAD_HANDOFF, NOT_STORED, UNPLANNABLE};
use self::state::{EventState, Outcome};
use self::store::{Claim, EventRow, Store};
use crate::clock::now_ms;
use crate::config::{InboxSettings, ReplyAfter};
use crate::effects;
use crate::fault::Fault;
use crate::log::{self, Line};
use crate::settings::Settings;

/// The Durable Object, one per `"{source}:{id}"`, that serializes an
/// event's copies, claims it, stores it before replying, and applies its
/// effect once: export it from the app (`pub use webhook_engine::objects::*;`)
/// as `EVENT_INBOX` binds it.
#[durable_object]
pub struct EventInbox {
    /// Shared with the effect a `record` reply leaves running, which must
    /// own what it uses. `wait_until` does not keep an object alive: if
    /// this one is evicted or dies first, its alarm applies the effect.
    inbox: Rc<Inbox>,
}

/// The object's state and what it does; [`EventInbox`] hands calls to it.
pub(crate) struct Inbox {
    state: State,
    env: Env,
    store: Store,
    /// Parsed once per instance; a bad variable fails every call, by name.
    engine: Rc<Settings>,
    /// Whether this instance is inside an effect attempt right now, or has
    /// one queued after a reply. An attempt can only be in flight in the
    /// live instance, so memory is the right place; it keeps the alarm from
    /// racing a delivery's own attempt (harmless thanks to the ledger, but
    /// wasted work).
    effect_running: Cell<bool>,
}

impl DurableObject for EventInbox {
    fn new(state: State, env: Env) -> Self {
        let store = Store::new(state.storage().sql());
        let engine = Settings::of(&env);
        let inbox = Inbox {
            state,
            env,
            store,
            engine,
            effect_running: Cell::new(false),
        };
        EventInbox {
            inbox: Rc::new(inbox),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let Received { reply, after_reply } = self.inbox.fetch(req).await?;
        if let Some(after_reply) = after_reply {
            let inbox = Rc::clone(&self.inbox);
            let effect = async move { inbox.apply_after_reply(after_reply).await };
            self.inbox.state.wait_until(effect);
        }
        Ok(reply)
    }

    async fn alarm(&self) -> Result<Response> {
        self.inbox.alarm().await
    }
}

impl Inbox {
    /// The paths [`client`] calls.
    async fn fetch(&self, req: Request) -> Result<Received> {
        let reply = match (req.method(), req.path().as_str()) {
            (Method::Post, client::DELIVER) => return self.deliver(req).await,
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
        };
        reply.map(Received::from)
    }

    /// A delivery: the [`Handoff`] read back, then received.
    async fn deliver(&self, mut req: Request) -> Result<Received> {
        let url = req.inner().url();
        let query = url.split_once('?').map_or("", |(_, query)| query);
        // Bytes, then UTF-8: `text()` may drop a leading BOM, and the body
        // must stay exactly as signed.
        let body = String::from_utf8(req.bytes().await?)
            .map_err(|_| "handoff: the body is not UTF-8".to_string());
        match body.and_then(|body| Handoff::from_parts(query, body)) {
            Ok(handoff) => self.receive(handoff).await,
            Err(e) => Response::error(e, BAD_HANDOFF).map(Received::from),
        }
    }

    pub(super) fn settings(&self) -> Result<&InboxSettings> {
        self.engine.inbox().map_err(Into::into)
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

    async fn receive(&self, handoff: Handoff) -> Result<Received> {
        let Handoff {
            event,
            verified,
            fault,
            reply_after,
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
            None => match crate::app::get() {
                // Held back, not stored: the sender retries once it has.
                None => {
                    log::error(&Line::new("engine_not_started").error(crate::app::NOT_STARTED));
                    return Response::error(crate::app::NOT_STARTED, NOT_STORED)
                        .map(Received::from);
                }
                Some(app) => match effects::plan(app.effects, &event, now_ms(), fault) {
                    Ok(plan) => Some(plan),
                    Err(e) => {
                        return Response::error(e.to_string(), UNPLANNABLE).map(Received::from)
                    }
                },
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
                return Response::error("not stored", NOT_STORED).map(Received::from);
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
                let armed = match armed {
                    Ok(()) => true,
                    Err(e) => {
                        log::error(&Line::new("alarm_not_set").key(&event.key()).error(e));
                        false
                    }
                };
                if fault == Some(Fault::LoseReply) {
                    return Err("injected fault: the reply is lost".into());
                }
                let planned = plan.map_or(Planned::FromStore(fault), Planned::First);
                // Recorded, and the alarm armed to cover a crash: answered
                // now, applied right after (`apply_after_reply`). Without the
                // alarm, nothing would retry the effect if this instance died
                // before arming one: then the effect comes first, as below.
                if reply_after == ReplyAfter::Record && armed {
                    let reply = Response::from_json(&Answer {
                        recorded: true,
                        ..Outcome::Accepted.into()
                    })?;
                    // Running from here, so that neither the alarm nor a
                    // replay races it meanwhile.
                    self.effect_running.set(true);
                    let after_reply = AfterReply {
                        event,
                        fault,
                        planned,
                    };
                    return Ok(Received {
                        reply,
                        after_reply: Some(after_reply),
                    });
                }
                let source = event.source.clone();
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
                match self.waiting_for_store(state).await? {
                    Some((retry_after_s, missing_migration)) => Answer {
                        retry_after_s: Some(retry_after_s),
                        missing_migration,
                        ..Outcome::Accepted.into()
                    },
                    None => Outcome::Duplicate.into(),
                }
            }
        };
        Response::from_json(&answer).map(Received::from)
    }

    /// For a held event whose last attempt could not reach its store, or
    /// found it behind: the seconds until its alarm retries (and the missing
    /// migration), so that a copy is told as the first delivery was
    /// (503, or 500 `misconfigured`), rather than that it is done.
    async fn waiting_for_store(&self, state: EventState) -> Result<Option<(i64, Option<String>)>> {
        if state != EventState::Received {
            return Ok(None);
        }
        let row = self.store.load()?;
        let Some(last_error) = row.as_ref().and_then(|row| row.last_error.as_deref()) else {
            return Ok(None);
        };
        let missing = crate::migrations::missing_of(last_error).map(str::to_string);
        if missing.is_none() && !crate::store::is_unavailable(last_error) {
            return Ok(None);
        }
        let alarm = self.state.storage().get_alarm().await?;
        let in_ms = alarm.map_or(0, |at| at - now_ms());
        Ok(Some((((in_ms + 999) / 1_000).max(1), missing)))
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
}
