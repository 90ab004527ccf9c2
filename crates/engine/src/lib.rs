//! An idempotent webhook receiver for Cloudflare Workers: the engine. An
//! app gives it its effects and any provider of its own ([`App`], handed
//! over by [`start`]), and calls [`fetch`], [`queue`] and [`scheduled`]
//! from the worker's entry points.
//!
//! A tour, in the order a delivery travels:
//!
//! - [`receive`]: `POST /webhooks/{source}` — caps the body, verifies the
//!   signature on the raw bytes, reads the provider's stable event id.
//! - [`sources`]: `[vars.SOURCES]` — each source's provider, secret and options.
//! - [`providers`]: one file per provider behind one trait, listed in one
//!   registry; [`signature`] holds the HMAC, constant-time and time-window pieces
//!   they share. An app adds its own through [`App::providers`].
//! - [`event`](mod@event): the verified, provider-independent event handed onward.
//! - [`inbox`]: the `EventInbox` Durable Object, one per `"{source}:{id}"`.
//!   It serializes duplicates, claims the event with synchronous SQL, stores
//!   it before replying, and retries an unfinished effect from its alarm;
//!   its state machine is pure code in `inbox/state.rs`.
//! - [`effects`]: what an event changes in D1 (the app's [`App::effects`]),
//!   applied in one batch with the [`ledger`] row that makes it happen
//!   once, and the outbox rows of its side effects.
//! - [`forward`]: with no code, events are also delivered to your own
//!   endpoints (`[vars.DESTINATIONS]`), once per destination, signed as
//!   Standard Webhooks, retried, with a breaker per destination.
//! - [`outbox`]: after the commit, side effects (an `Email`, a
//!   `ChatMessage`) go through a Queue; the consumer performs each once,
//!   under its own idempotency key, and a cron relay re-sends what a lost
//!   message left behind. **Add a kind of call** there: one file and one
//!   `Action` variant.
//! - [`admin`]: `/admin/api/…` behind a bearer token and the `/admin`
//!   dashboard — events, their deliveries and side effects, replay, dismiss,
//!   requeue. **Add an endpoint** in `admin/api.rs`, reading through
//!   `admin/queries.rs`. [`admin_guard`]: the Durable Objects that count
//!   wrong tokens per client and overall, and remember signed-out sessions.
//!
//! Shared chores, one way each: [`config`] (vars and secrets, errors that
//! name the variable), [`d1`] (statements and typed rows), [`clock`],
//! [`log`] (one JSON object per line), [`names`] (the names enums are
//! stored under), [`http`] (capped bodies, outgoing POSTs), [`failed_events`] and [`stats`] (what operators see), and
//! [`fault`] (the faults the end-to-end tests inject).

#[cfg(any(feature = "admin", feature = "dashboard"))]
pub mod admin;
pub mod admin_guard;
pub mod app;
pub mod clock;
pub mod config;
pub mod d1;
pub mod effects;
pub mod event;
pub mod failed_events;
pub mod fault;
pub mod forward;
pub mod http;
pub mod inbox;
pub mod ledger;
pub mod log;
pub mod names;
pub mod outbox;
pub mod providers;
pub mod receive;
pub mod signature;
pub mod sources;
pub mod stats;

use worker::wasm_bindgen::JsValue;
use worker::{Context, Env, MessageBatch, Method, Request, Response, Result, ScheduledEvent};

pub use admin_guard::AdminGuard;
pub use app::{start, App};
pub use inbox::EventInbox;

/// The dashboard's sign-in and action forms: their handlers read the body.
#[cfg(feature = "dashboard")]
fn dashboard_form(path: &str) -> bool {
    path == "/admin/login"
        || path.starts_with("/admin/events/")
        || path.starts_with("/admin/outbox/")
        || path.starts_with("/admin/destinations/")
}

#[cfg(not(feature = "dashboard"))]
fn dashboard_form(_: &str) -> bool {
    false
}

/// The worker's `fetch`: `POST /webhooks/{source}`, and the admin API and
/// dashboard under `/admin`.
pub async fn fetch(mut req: Request, env: Env, ctx: Context) -> Result<Response> {
    log::configure(&env);
    let path = req.path();
    let reads_body =
        req.method() == Method::Post && (path.starts_with("/webhooks/") || dashboard_form(&path));
    if !reads_body && http::has_body(&req) {
        // No other route reads a body. Drop a small one anyway, so that the
        // connection can carry the client's next request (left unread, the
        // runtime must close it); refuse a large one.
        if let Err(refused) = http::drain(&mut req, http::UNWANTED_BODY_MAX_BYTES).await {
            let response = refused.response();
            #[cfg(any(feature = "admin", feature = "dashboard"))]
            if path.starts_with("/admin") {
                return admin::harden(response);
            }
            return response;
        }
    }
    if let Some(_rest) = path.strip_prefix("/admin/api/") {
        #[cfg(feature = "admin")]
        return admin::harden(admin::api::handle(req, &env, _rest).await);
        #[cfg(all(not(feature = "admin"), feature = "dashboard"))]
        return admin::harden(Response::error("not found", 404));
    }
    #[cfg(feature = "dashboard")]
    if path == "/admin" || path.starts_with("/admin/") {
        return admin::harden(admin::dashboard::handle(req, &env, &path).await);
    }
    match path.strip_prefix("/webhooks/") {
        Some(source) if req.method() == Method::Post => {
            receive::handle(req, &env, &ctx, source).await
        }
        Some(_) => Ok(Response::error("method not allowed: POST only", 405)?
            .with_headers([("allow", "POST")].iter().collect())),
        None if path == "/" => {
            Response::ok("idempotent webhook receiver: POST /webhooks/{source}\n")
        }
        None => Response::error("not found", 404),
    }
}

/// The queues' consumers: the outbox performs side effects, each under its
/// own key; the forward queue delivers events to their destinations.
pub async fn queue(batch: MessageBatch<JsValue>, env: Env) -> Result<()> {
    log::configure(&env);
    if batch.queue() == config::FORWARD_QUEUE {
        forward::consumer::consume(batch, &env).await
    } else {
        outbox::consumer::consume(batch, &env).await
    }
}

/// The cron relays (`[triggers] crons`): re-send outbox rows and forward
/// deliveries whose queue message was lost, and the breakers' probes.
pub async fn scheduled(_event: ScheduledEvent, env: Env) {
    log::configure(&env);
    if let Err(e) = outbox::relay::run(&env).await {
        log::error(&log::Line::new("outbox_relay_failed").error(e));
    }
    if let Err(e) = forward::relay::run(&env).await {
        log::error(&log::Line::new("forward_relay_failed").error(e));
    }
}
