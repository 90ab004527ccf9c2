//! The app: your webhook endpoint, built on the engine (`webhook-engine`,
//! vendored under crates/engine). The engine verifies, dedupes, applies
//! and forwards; this crate says what an event changes ([`effects`]) and
//! wires the worker's entry points to the engine.
//!
//! Yours to edit: `effects/` (an effect: its file, its line in `EFFECTS`,
//! its migration), and this file (a provider or a side effect of your own:
//! its line in `APP`; a route of your own: a match arm before the engine's
//! `fetch`). The engine is never edited: a newer one replaces it whole.

pub mod effects;

use webhook_engine::providers::Build;
use webhook_engine::App;
use worker::wasm_bindgen::JsValue;
use worker::{
    event, Context, Env, MessageBatch, Request, Response, Result, ScheduleContext, ScheduledEvent,
};

/// The engine's Durable Objects, exported for `wrangler.toml`'s bindings
/// (all of them: a newer engine's come along).
pub use webhook_engine::objects::*;

/// Your own providers: `(name, constructor)`, the name being what a
/// source's `provider` says (docs/extend.md).
const PROVIDERS: &[(&str, Build)] = &[
    // (name, constructor): one line per provider of your own.
];

/// What the engine runs with: your effects, your side effects and your
/// providers.
static APP: App = App::new(effects::EFFECTS)
    .side_effects(effects::PERFORMERS)
    .providers(PROVIDERS);

#[event(start)]
fn start() {
    webhook_engine::start(&APP);
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    webhook_engine::fetch(req, env, ctx).await
}

#[event(queue)]
async fn queue(batch: MessageBatch<JsValue>, env: Env, _ctx: Context) -> Result<()> {
    webhook_engine::queue(batch, env).await
}

#[event(scheduled)]
async fn scheduled(event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    webhook_engine::scheduled(event, env).await
}
