#![deny(missing_docs)]
//! Receive webhooks on Cloudflare Workers idempotently: one event, one
//! business effect, however many times and however concurrently it
//! arrives. The engine is everything but your effects: verification, the
//! Durable Object per event, the ledger, the outbox, forwarding, the admin
//! API and dashboard. Your app hands it an [`App`] (your effects, and any
//! provider of your own) and calls [`fetch`], [`queue`] and [`scheduled`]
//! from the worker's entry points.
//!
//! # A delivery
//!
//! 1. `POST /webhooks/{source}` reaches [`fetch`]. It caps the body, finds
//!    the source in `[vars.SOURCES]` ([`SourceConfig`](providers::SourceConfig)), and checks
//!    the signature on the raw bytes with the source's
//!    [`Provider`](providers::Provider), before parsing anything. Then it
//!    reads the provider's stable event id: a [`VerifiedEvent`](event::VerifiedEvent).
//! 2. The event goes to the [`EventInbox`](objects::EventInbox) Durable Object named
//!    `"{source}:{id}"`. Concurrent copies queue on that one object. It
//!    claims the id in its own SQLite storage and stores the event before
//!    anyone gets an answer.
//! 3. The inbox plans the effect: the [`Planner`](effects::Planner) that
//!    [`App::new`] lists for the event's provider and type returns an
//!    [`Effect`](effects::Effect) (SQL writes, side effects). The ledger
//!    row, the writes, one outbox row per side effect and the deliveries to
//!    your destinations commit in ONE D1 batch. A second attempt fails on
//!    the ledger row's key and changes nothing.
//! 4. After the commit, each side effect ([`Email`](outbox::Email),
//!    [`ChatMessage`](outbox::ChatMessage), [`HttpCall`](outbox::HttpCall))
//!    goes through a Queue: [`queue`] performs it once, under its own
//!    idempotency key. [`scheduled`] re-sends what a lost message left
//!    behind, and forwards events to your destinations.
//! 5. A failed effect retries from the inbox's alarm. An event that spends
//!    its retries is listed as failed, for an operator to replay or dismiss
//!    (the `admin` API and the `dashboard`).
//!
//! # An app
//!
//! A whole worker: one effect, and the entry points. The effect's table
//! comes in a migration of the app's; the engine's own are in its
//! `migrations/`.
//!
//! ```
//! use webhook_engine::effects::{parse, Effect, Effects, PlanError, Statement, StripeEvent};
//! use webhook_engine::event::VerifiedEvent;
//! use webhook_engine::outbox::Email;
//! use webhook_engine::App;
//! use worker::wasm_bindgen::JsValue;
//! use worker::{event, Context, Env, MessageBatch, Request, Response, ScheduleContext, ScheduledEvent};
//!
//! // The engine's Durable Objects, exported under the names wrangler.toml binds.
//! pub use webhook_engine::objects::*;
//!
//! #[derive(serde::Deserialize)]
//! struct Invoice {
//!     id: String,
//!     amount_paid: i64,
//!     customer_email: Option<String>,
//! }
//!
//! /// `invoice.paid`: the invoice is recorded as paid, and one receipt is sent.
//! fn invoice_paid(event: &VerifiedEvent, now: i64) -> Result<Effect, PlanError> {
//!     let invoice = parse::<StripeEvent<Invoice>>(&event.body)?.data.object;
//!     let writes = vec![Statement::new(
//!         "INSERT INTO invoices (id, amount, paid_at) VALUES (?1, ?2, ?3)",
//!         vec![invoice.id.as_str().into(), invoice.amount_paid.into(), now.into()],
//!     )];
//!     let receipt = invoice.customer_email.map(|to| {
//!         let text = format!("Invoice {} is paid.", invoice.id);
//!         Email::new(to, "Your receipt", text).send().about("invoice", &invoice.id)
//!     });
//!     Ok(Effect::new(writes).with(receipt))
//! }
//!
//! /// Which effect each event gets: `(provider, event type, planner)`.
//! const EFFECTS: &Effects = &[("stripe", "invoice.paid", invoice_paid)];
//!
//! static APP: App = App::new(EFFECTS);
//!
//! #[event(start)]
//! fn start() {
//!     webhook_engine::start(&APP);
//! }
//!
//! #[event(fetch)]
//! async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
//!     webhook_engine::fetch(req, env, ctx).await
//! }
//!
//! #[event(queue)]
//! async fn queue(batch: MessageBatch<JsValue>, env: Env, _ctx: Context) -> worker::Result<()> {
//!     webhook_engine::queue(batch, env).await
//! }
//!
//! #[event(scheduled)]
//! async fn scheduled(event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
//!     webhook_engine::scheduled(event, env).await
//! }
//! # fn main() {
//! #     let event = VerifiedEvent::example("stripe", "invoice.paid",
//! #         r#"{"created":1,"data":{"object":{"id":"in_1","amount_paid":900,"customer_email":"a@b.c"}}}"#);
//! #     let plan = webhook_engine::effects::plan_with(EFFECTS, &event, 5).unwrap();
//! #     assert_eq!(plan.batch.len(), 3); // the ledger row, the insert, the receipt's outbox row
//! # }
//! ```
//!
//! A provider of your own implements [`Provider`](providers::Provider) and
//! takes its line in [`App::providers`]: `("acme-pay", acme_pay::build)`.
//! A side effect of your own is a [`Performer`](outbox::Performer), its
//! line in [`App::side_effects`], and [`SideEffect::custom`](outbox::SideEffect::custom)
//! in an effect. docs/api.md lists every public item and why it is public.
//!
//! # Features
//!
//! Each provider is a feature (`stripe`, `github`, `standard-webhooks`
//! with `svix`, `shopify`, `slack`, `linear`, `paddle`, `twilio`,
//! `generic-hmac`), as are the admin API (`admin`) and the dashboard
//! (`dashboard`); all are on by default. A source whose provider is
//! compiled out is refused with a message naming the feature.
//!
//! # Inside
//!
//! In the order a delivery travels: `receive.rs`, `providers/`, `inbox/`
//! (its state machine is pure code in `inbox/state.rs`), `effects.rs` and
//! `ledger.rs`, `forward/`, `outbox/`, `admin/` and `admin_guard/`. Shared
//! chores, one way each: `config/`, `d1.rs`, `clock.rs`, `log.rs`,
//! `names.rs`, `http.rs`, `failed_events.rs`, `stats/`, `fault.rs` (the
//! faults the end-to-end tests inject).

#[cfg(any(feature = "admin", feature = "dashboard"))]
mod admin;
// `#[durable_object]`'s generated bindings carry no docs.
#[allow(missing_docs)]
mod admin_guard;
mod app;
mod clock;
mod config;
mod d1;
pub mod effects;
pub mod event;
mod failed_events;
mod fault;
mod forward;
mod handoff_rows;
mod http;
// `#[durable_object]`'s generated bindings carry no docs.
#[allow(missing_docs)]
mod inbox;
mod ledger;
mod log;
mod migrations;
mod names;
pub mod outbox;
#[cfg(feature = "postgres")]
mod postgres;
pub mod providers;
mod receive;
mod settings;
pub mod signature;
mod sources;
mod stats;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

use worker::wasm_bindgen::JsValue;
use worker::{Context, Env, MessageBatch, Method, Request, Response, Result, ScheduledEvent};

pub use app::{start, App};

/// No promise: what the template's own tests and fuzzers reach into, to
/// drive the engine's internals from outside. Any release may change or
/// remove it, and an app never needs it (docs/api.md).
#[doc(hidden)]
pub mod unstable {
    use crate::providers::{Build, ConfigError, Provider, SourceConfig};

    /// A source's verifier, as the worker builds it: among the engine's
    /// providers and `own`.
    pub fn build_provider(
        config: &SourceConfig,
        own: &[(&str, Build)],
    ) -> Result<Box<dyn Provider>, ConfigError> {
        crate::providers::build(config, own)
    }
}

/// The engine's Durable Object classes. The app exports them all, with
/// `pub use webhook_engine::objects::*;`, so that a newer engine's classes
/// come along without an edit (`wrangler.toml` binds them by name).
pub mod objects {
    pub use crate::admin_guard::AdminGuard;
    pub use crate::inbox::EventInbox;
}
use settings::Settings;

/// The dashboard's sign-in and action forms: their handlers read the body.
#[cfg(feature = "dashboard")]
fn dashboard_form(path: &str) -> bool {
    path == "/admin/login"
        || path.starts_with("/admin/events/")
        || path.starts_with("/admin/outbox/")
        || path.starts_with("/admin/destinations/")
        || path == "/admin/handoff/retry"
}

#[cfg(not(feature = "dashboard"))]
fn dashboard_form(_: &str) -> bool {
    false
}

/// The worker's `fetch`: `POST /webhooks/{source}`, and the admin API and
/// dashboard under `/admin`.
pub async fn fetch(mut req: Request, env: Env, ctx: Context) -> Result<Response> {
    let settings = Settings::of(&env);
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
        return admin::harden(admin::api::handle(req, &env, &settings, _rest).await);
        #[cfg(all(not(feature = "admin"), feature = "dashboard"))]
        return admin::harden(Response::error("not found", 404));
    }
    #[cfg(feature = "dashboard")]
    if path == "/admin" || path.starts_with("/admin/") {
        return admin::harden(admin::dashboard::handle(req, &env, &settings, &path).await);
    }
    match path.strip_prefix("/webhooks/") {
        Some(source) if req.method() == Method::Post => {
            receive::handle(req, &env, &settings, &ctx, source).await
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
    let settings = Settings::of(&env);
    match config::Consumed::of(&batch.queue()) {
        Some(config::Consumed::Forward) => forward::consumer::consume(batch, &env, &settings).await,
        Some(config::Consumed::Outbox) => outbox::consumer::consume(batch, &env, &settings).await,
        None => {
            // Neither consumer's: retried (then dead-lettered), never
            // handed to the wrong one.
            log::error(&log::Line::new("queue_unknown").detail(batch.queue()));
            batch.retry_all();
            Ok(())
        }
    }
}

/// The cron relays (`[triggers] crons`): re-send outbox rows and forward
/// deliveries whose queue message was lost, and the breakers' probes.
pub async fn scheduled(_event: ScheduledEvent, env: Env) {
    let settings = Settings::of(&env);
    // First: what it hands off to D1 the relays below then send.
    #[cfg(feature = "postgres")]
    postgres::relay(&env, &settings).await;
    if let Err(e) = outbox::relay::run(&env, &settings).await {
        log::error(&log::Line::new("outbox_relay_failed").error(e));
    }
    if let Err(e) = forward::relay::run(&env, &settings).await {
        log::error(&log::Line::new("forward_relay_failed").error(e));
    }
}
