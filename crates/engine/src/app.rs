//! What the app gives the engine: its effects, and any provider or side
//! effect of its own. Handed over once, by the app's `#[event(start)]`,
//! before any request: the Durable Objects the engine defines are made by
//! the runtime, not by the app, so they find the app here.

use std::sync::OnceLock;

use crate::effects::Effects;
use crate::log::{self, Line};
use crate::outbox::Performer;
use crate::providers::Build;

/// The app: its effects, its providers and its side effects. Built in a
/// `static` with [`App::new`] and the methods after it, so that a later
/// engine can add a part without breaking a copy's `lib.rs`:
///
/// ```
/// # use webhook_engine::App;
/// # use webhook_engine::effects::Effects;
/// const EFFECTS: &Effects = &[];
/// static APP: App = App::new(EFFECTS);
/// ```
#[non_exhaustive]
pub struct App {
    /// Which effect each event gets: `(provider, event type, planner)`.
    pub(crate) effects: &'static Effects,
    /// `(name, constructor)`: looked up before the engine's own.
    pub(crate) providers: &'static [(&'static str, Build)],
    /// `(name, performer)`: the side effects of the app's own.
    pub(crate) side_effects: &'static [(&'static str, Performer)],
}

impl App {
    /// An app with these effects: `(provider, event type, planner)`, one
    /// line per effect. An event not listed has none: its ledger row alone
    /// records that it was handled.
    pub const fn new(effects: &'static Effects) -> App {
        App {
            effects,
            providers: &[],
            side_effects: &[],
        }
    }

    /// The app's own providers: `(name, constructor)`, the name being what
    /// a source's `provider` says (see [`Provider`](crate::providers::Provider)).
    /// Looked up before the engine's own.
    pub const fn providers(self, providers: &'static [(&'static str, Build)]) -> App {
        App { providers, ..self }
    }

    /// The app's own side effects: `(name, performer)`. An effect writes one
    /// with [`SideEffect::custom`](crate::outbox::SideEffect::custom) under
    /// that name; the outbox performs it once, under its own idempotency
    /// key, as it does an email (see [`outbox`](crate::outbox)).
    pub const fn side_effects(self, side_effects: &'static [(&'static str, Performer)]) -> App {
        App {
            side_effects,
            ..self
        }
    }
}

static APP: OnceLock<&'static App> = OnceLock::new();

/// Starts the engine with the app: call it from `#[event(start)]`. Also
/// logs a panic's message before the runtime ends the instance.
pub fn start(app: &'static App) {
    console_error_panic_hook::set_once();
    // A name that is not snake_case, or one registered twice (whose first
    // performer would take both's rows): said here, once.
    if let Some(why) = crate::outbox::refused_side_effects(app.side_effects) {
        log::error(&Line::new("app_misconfigured").detail(why));
    }
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
