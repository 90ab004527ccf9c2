//! An idempotent webhook receiver for Cloudflare Workers.
//!
//! A tour, in the order a delivery travels:
//!
//! - [`receive`]: `POST /webhooks/{source}` — caps the body, verifies the
//!   signature on the raw bytes, reads the provider's stable event id.
//! - [`providers`]: one file per provider behind one trait (Stripe, GitHub);
//!   [`signature`] holds the HMAC, constant-time and time-window pieces they share.
//! - [`event`]: the verified, provider-independent event handed onward.
//! - [`inbox`]: the `EventInbox` Durable Object, one per `"{source}:{id}"`.
//!   It serializes duplicates, claims the event with synchronous SQL, stores
//!   it before replying, and retries an unfinished effect from its alarm.
//! - [`effects`]: what an event changes in D1, applied in one batch with the
//!   ledger row that makes it happen once.
//! - [`config`]: vars, secrets and bindings, with errors that name the variable.

pub mod config;
pub mod effects;
pub mod event;
pub mod inbox;
pub mod providers;
pub mod receive;
pub mod signature;

use worker::{event, Context, Env, Method, Request, Response, Result};

pub use inbox::EventInbox;

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let path = req.path();
    match path.strip_prefix("/webhooks/") {
        Some(source) if req.method() == Method::Post => receive::handle(req, &env, source).await,
        Some(_) => Ok(Response::error("method not allowed: POST only", 405)?
            .with_headers([("allow", "POST")].iter().collect())),
        None if path == "/" => {
            Response::ok("idempotent webhook receiver: POST /webhooks/{source}\n")
        }
        None => Response::error("not found", 404),
    }
}
