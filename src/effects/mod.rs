//! Your effects: what an event changes in your database. The engine
//! applies each in ONE transaction with the event's ledger row, which
//! makes it happen once, and with the outbox rows of its side effects.
//!
//! To add an effect: a file here whose function reads the event and returns
//! an [`Effect`](webhook_engine::effects::Effect), its `mod` line, its line
//! in `EFFECTS`, and a migration for its tables. Where each goes:
//! docs/extend.md, "A business effect".
//! Planning is pure, so it is tested on the host.
//!
//! A side effect of your own (a call the engine does not make for you) is
//! a performer, and its line in `PERFORMERS` (docs/extend.md, "A side
//! effect").

mod contacts;
mod orders;
mod receipts;
mod stars;
mod subscriptions;

use webhook_engine::effects::Effects;
use webhook_engine::outbox::Performer;

/// Which effect each event gets, by provider and event type. An event not
/// listed has none: its ledger row alone records that it was handled. Where
/// several sources share a provider, an effect tells them apart by
/// `event.source`, the name in their URL.
#[rustfmt::skip]
pub const EFFECTS: &Effects = &[
    // (provider, event type, planner): one line per effect.
    ("stripe", "checkout.session.completed", orders::completed),
    ("stripe", "checkout.session.async_payment_succeeded", orders::async_succeeded),
    ("stripe", "checkout.session.async_payment_failed", orders::async_failed),
    ("stripe", "payment_intent.succeeded", orders::payment_succeeded),
    ("stripe", "customer.subscription.updated", subscriptions::set_state),
    ("stripe", "customer.subscription.deleted", subscriptions::set_state),
    ("stripe", "customer.created", contacts::created),
    ("github", "star.created", stars::created),
    ("github", "star.deleted", stars::deleted),
];

/// Your own side effects, by the name an effect writes them under
/// (`SideEffect::custom`), and the performer the outbox runs for them.
#[rustfmt::skip]
pub const PERFORMERS: &[(&str, Performer)] = &[
    // (name, performer): one line per side effect of your own.
    (contacts::CRM_CONTACT, contacts::crm_contact),
];
