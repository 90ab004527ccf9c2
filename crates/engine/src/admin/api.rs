//! The admin API, `/admin/api/…`, behind `Authorization: Bearer <ADMIN_TOKEN>`.
//!
//! - `GET  /admin/api/events?status=processed|failed&source=&type=&limit=`
//! - `GET  /admin/api/events/{source}/{id}`: ledger row, failure, outbox
//!   rows, and the inbox's state with its deliveries
//! - `POST /admin/api/events/{source}/{id}/replay`: the effect path again; a
//!   no-op (`"outcome":"duplicate"`) when the ledger says it is done
//! - `POST /admin/api/events/{source}/{id}/dismiss`: a failed event will not
//!   be applied; it leaves the failed list and is forgotten at retention
//! - `GET  /admin/api/outbox?status=dead|pending|sending|sent&limit=`
//! - `POST /admin/api/outbox/{key}/requeue`: a dead row made due and sent
//! - `GET  /admin/api/stats`: per source, the delivery counters (`stats`)
//!   and exact counts from the ledger, `failed_events` and `outbox`
//! - `GET  /admin/api/destinations`: each destination's state, backlog,
//!   dead count, success rate, p50/p99 latency and last error
//! - `POST /admin/api/destinations/{name}/requeue|pause|resume|enable|discard`
//! - `POST /admin/api/deliveries/{id}/redeliver`: again, under the same
//!   `webhook-id`
//! - `GET  /admin/api/handoff?limit=` (Postgres): rows left to hand off to
//!   D1, and those the relay gave up on (`stuck_rows`, oldest first)
//! - `POST /admin/api/handoff/retry` (Postgres): the stuck rows due again

use serde::Serialize;
use worker::{Env, Method, Request, Response, Result};

#[cfg(feature = "postgres")]
use super::handoff::{self, HandOff};
use super::queries::{self, EventFilter, Listing};
use super::{admin_token, bearer, decode, guard, token_matches, Closed, Denied, Query};
use crate::d1::Json;
use crate::forward::operate::{self, DestinationAction};
use crate::forward::report;
use crate::inbox::client::{self, ActionResult, Answer};
use crate::inbox::state::Outcome;
use crate::log::{self, Line};
use crate::outbox::OutboxStatus;
use crate::settings::Settings;

/// `path` is what follows `/admin/api/`.
/// One admin API request (`path`, after `/admin/api/`).
pub async fn handle(req: Request, env: &Env, settings: &Settings, path: &str) -> Result<Response> {
    let token = match admin_token(settings) {
        Ok(token) => token,
        Err(Closed::Unset) => return Response::error("not found", 404),
        Err(Closed::Misconfigured) => return Response::error("misconfigured", 500),
    };
    let checked = match bearer(&req) {
        Some(presented) => guard(env, settings, &req, token_matches(token, &presented)).await,
        None => Err(Denied::Wrong),
    };
    if let Err(denied) = checked {
        let message = match denied {
            Denied::Wrong => "unauthorized",
            Denied::Throttled(_) => "too many failed attempts",
            Denied::Unavailable => "try again",
        };
        let mut response = denied.answer(Response::error(message, denied.status()))?;
        if let Denied::Wrong = denied {
            response.headers_mut().set("www-authenticate", "Bearer")?;
        }
        return Ok(response);
    }
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let query = Query::of(&req);
    match (req.method(), segments.as_slice()) {
        (Method::Get, ["events"]) => list_events(env, &query).await,
        (Method::Get, ["events", source, id]) => {
            Response::from_json(&queries::event(env, source, id).await?)
        }
        (Method::Post, ["events", source, id, "replay"]) => replay(env, source, id).await,
        (Method::Post, ["events", source, id, "dismiss"]) => dismiss(env, source, id).await,
        (Method::Get, ["outbox"]) => list_outbox(env, &query).await,
        (Method::Post, ["outbox", key, "requeue"]) => requeue(env, key).await,
        (Method::Get, ["destinations"]) => {
            #[derive(Serialize)]
            struct Destinations {
                destinations: Vec<report::DestinationReport>,
            }
            let destinations = report::destinations(env, settings).await?;
            Response::from_json(&Destinations { destinations })
        }
        (Method::Post, ["destinations", name, action]) => {
            let Some(action) = DestinationAction::from_name(action) else {
                return Response::error(
                    "the action must be requeue, pause, resume, enable or discard",
                    404,
                );
            };
            #[derive(Serialize)]
            struct Done {
                changed: bool,
            }
            let changed = operate::destination(env, settings, name, action).await?;
            Response::from_json(&Done { changed })
        }
        (Method::Post, ["deliveries", id, "redeliver"]) => {
            if !operate::redeliver(env, id).await? {
                return Response::error("no dead or delivered delivery with that id", 404);
            }
            #[derive(Serialize)]
            struct Redelivered {
                redelivered: bool,
            }
            Response::from_json(&Redelivered { redelivered: true })
        }
        (Method::Get, ["stats"]) => {
            #[derive(Serialize)]
            struct StatsAnswer {
                stats: Json<queries::Stats>,
            }
            let stats = queries::stats(env).await?;
            Response::from_json(&StatsAnswer { stats })
        }
        #[cfg(feature = "postgres")]
        (Method::Get, ["handoff"]) => {
            match handoff::read(env, settings, query.limit().into()).await {
                HandOff::None => Response::error(NO_HANDOFF, 404),
                HandOff::Unavailable(e) => Response::error(e.message(), handoff::status(&e)),
                HandOff::Backlog(backlog) => Response::from_json(&backlog),
            }
        }
        #[cfg(feature = "postgres")]
        (Method::Post, ["handoff", "retry"]) => match handoff::retry(env, settings).await {
            Ok(None) => Response::error(NO_HANDOFF, 404),
            Ok(Some(retried)) => {
                #[derive(Serialize)]
                struct Retried {
                    retried: i64,
                }
                Response::from_json(&Retried { retried })
            }
            Err(e) => Response::error(e.message(), handoff::status(&e)),
        },
        _ => Response::error("not found", 404),
    }
}

/// The answer about the hand-off where effects commit in D1.
#[cfg(feature = "postgres")]
const NO_HANDOFF: &str = "effects commit in D1 here: nothing is handed off";

async fn list_events(env: &Env, query: &Query) -> Result<Response> {
    let Some(listing) = Listing::from_name(query.get("status").unwrap_or("processed")) else {
        return Response::error("status must be processed or failed", 400);
    };
    let filter = EventFilter {
        source: query.get("source"),
        kind: query.get("type"),
        ..EventFilter::default()
    };
    #[derive(Serialize)]
    struct EventList {
        events: Json<Vec<queries::ListedEvent>>,
    }
    let events = queries::events(env, listing, &filter, query.limit()).await?;
    Response::from_json(&EventList { events })
}

async fn list_outbox(env: &Env, query: &Query) -> Result<Response> {
    let Some(status) = OutboxStatus::from_name(query.get("status").unwrap_or("dead")) else {
        return Response::error("status must be dead, pending, sending or sent", 400);
    };
    #[derive(Serialize)]
    struct OutboxList {
        outbox: Json<Vec<queries::OutboxRow>>,
    }
    let outbox = queries::outbox_rows(env, status, query.limit()).await?;
    Response::from_json(&OutboxList { outbox })
}

async fn replay(env: &Env, source: &str, id: &str) -> Result<Response> {
    let answer = match client::replay(env, source, id).await? {
        ActionResult::Done(answer) => answer,
        ActionResult::Failed(status) => return Err(format!("the inbox answered {status}").into()),
        ActionResult::NoEvent | ActionResult::NotFailed => {
            return Response::error(
                "the inbox holds no such event (never received, or past retention)",
                404,
            )
        }
    };
    #[derive(Serialize)]
    struct Replayed {
        #[serde(flatten)]
        answer: Answer,
        noop: bool,
    }
    let noop = answer.outcome == Outcome::Duplicate;
    Response::from_json(&Replayed { answer, noop })
}

/// An operator's decision not to apply a failed event.
async fn dismiss(env: &Env, source: &str, id: &str) -> Result<Response> {
    let not_recorded = "the dismissal was not recorded; try again";
    match client::dismiss(env, source, id).await {
        Ok(ActionResult::Done(answer)) => Response::from_json(&answer),
        Ok(ActionResult::NoEvent) => Response::error("the inbox holds no such event", 404),
        Ok(ActionResult::NotFailed) => Response::error("only a failed event can be dismissed", 409),
        Ok(ActionResult::Failed(status)) => Response::error(not_recorded, status.max(500)),
        Err(e) => {
            log::error(&Line::new("admin_error").error(e));
            Response::error(not_recorded, 500)
        }
    }
}

async fn requeue(env: &Env, key: &str) -> Result<Response> {
    if !queries::requeue(env, key).await? {
        return Response::error("no dead outbox row with that key", 404);
    }
    #[derive(Serialize)]
    struct Requeued {
        requeued: bool,
    }
    Response::from_json(&Requeued { requeued: true })
}
