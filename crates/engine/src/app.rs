//! What the app gives the engine: its effects, and any provider of its
//! own. Handed over once, by the app's `#[event(start)]`, before any
//! request: the Durable Objects the engine defines are made by the runtime,
//! not by the app, so they find the app here.

use std::sync::OnceLock;

use crate::effects::Effects;
pub use crate::providers::Build;

/// The app: its effects and its providers.
pub struct App {
    /// Which effect each event gets: `(provider, event type, planner)`. An
    /// event not listed has none: its ledger row alone records that it was
    /// handled.
    pub effects: &'static Effects,
    /// The app's own providers: `(name, constructor)`, the name being what
    /// a source's `provider` says. Looked up before the engine's own.
    pub providers: &'static [(&'static str, Build)],
}

static APP: OnceLock<&'static App> = OnceLock::new();

/// Starts the engine with the app: call it from `#[event(start)]`. Also
/// logs a panic's message before the runtime ends the instance.
pub fn start(app: &'static App) {
    console_error_panic_hook::set_once();
    // A second call (a re-started instance runs `start` again) keeps the
    // first: the same app.
    let _ = APP.set(app);
}

/// The app `start` was given; `None` if it never ran. Never an empty
/// table in its place: an event planned without the app's effects would
/// commit its ledger row and lose its effect for good.
pub(crate) fn get() -> Option<&'static App> {
    APP.get().copied()
}

/// Why an event waits when the app never called [`start`].
pub(crate) const NOT_STARTED: &str =
    "the app never called webhook_engine::start: its effects are unknown";
