//! The dashboard's actions — Replay, Dismiss, Requeue, Redeliver, and a
//! destination's Requeue dead, Pause, Resume and Re-enable — by their paths, what
//! each did as the page after it says, and the audit line of each.

use serde::Serialize;
use worker::Env;

use super::{decode, queries};
use crate::event::dedupe_key;
use crate::forward::operate::{self, DestinationAction};
use crate::inbox::client::{self, ActionResult};
use crate::inbox::state::Outcome;
use crate::settings::Settings;

/// The audit line of an operator's action: who (the session, by a digest
/// of its cookie, never the token), what, on what, and how it ended.
#[derive(Serialize)]
pub(super) struct Audit {
    pub(super) msg: &'static str,
    pub(super) action: &'static str,
    pub(super) target: String,
    pub(super) outcome: &'static str,
    pub(super) session: String,
}

/// An operator's action, by its path (segments as sent, percent-encoded).
pub(super) enum Action<'a> {
    /// One more attempt at an event (a no-op if its effect committed).
    Replay { source: &'a str, id: &'a str },
    /// A decision not to apply a failed event.
    Dismiss { source: &'a str, id: &'a str },
    /// A dead side effect made due again.
    Requeue { key: &'a str },
    /// A forwarded event's delivery sent again, under the same id.
    Redeliver {
        source: &'a str,
        id: &'a str,
        delivery: &'a str,
    },
    /// An action on a destination.
    Destination {
        name: &'a str,
        action: DestinationAction,
    },
    /// The hand-off rows the relay gave up on, due again (Postgres).
    #[cfg(feature = "postgres")]
    RetryHandOff,
}

impl<'a> Action<'a> {
    pub(super) fn parse(path: &'a str) -> Option<Self> {
        #[cfg(feature = "postgres")]
        if path == "/admin/handoff/retry" {
            return Some(Action::RetryHandOff);
        }
        if let Some(key) = path
            .strip_prefix("/admin/outbox/")
            .and_then(|rest| rest.strip_suffix("/requeue"))
            .filter(|key| !key.contains('/'))
        {
            return Some(Action::Requeue { key });
        }
        if let Some((name, action)) = path
            .strip_prefix("/admin/destinations/")
            .and_then(|rest| rest.split_once('/'))
        {
            let action = DestinationAction::from_name(action)?;
            return (!name.contains('/')).then_some(Action::Destination { name, action });
        }
        let event_path = path.strip_prefix("/admin/events/")?;
        if let Some((event, delivery)) = event_path.split_once("/redeliver/") {
            let (source, id) = event.split_once('/')?;
            return (!delivery.contains('/')).then_some(Action::Redeliver {
                source,
                id,
                delivery,
            });
        }
        let (event, action) = event_path.rsplit_once('/')?;
        let (source, id) = event.split_once('/')?;
        match action {
            "replay" => Some(Action::Replay { source, id }),
            "dismiss" => Some(Action::Dismiss { source, id }),
            _ => None,
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            Action::Replay { .. } => "replay",
            Action::Dismiss { .. } => "dismiss",
            Action::Requeue { .. } => "requeue",
            Action::Redeliver { .. } => "redeliver",
            Action::Destination { action, .. } => action.name(),
            #[cfg(feature = "postgres")]
            Action::RetryHandOff => "retry-handoff",
        }
    }

    /// The event's key, or the side effect's.
    pub(super) fn target(&self) -> String {
        match self {
            Action::Replay { source, id } | Action::Dismiss { source, id } => {
                dedupe_key(&decode(source), &decode(id))
            }
            Action::Requeue { key } | Action::Redeliver { delivery: key, .. } => decode(key),
            Action::Destination { name, .. } => decode(name),
            #[cfg(feature = "postgres")]
            Action::RetryHandOff => "stuck hand-off rows".into(),
        }
    }

    /// The page to go back to: the event's, or the overview.
    pub(super) fn back(&self) -> String {
        match self {
            Action::Replay { source, id }
            | Action::Dismiss { source, id }
            | Action::Redeliver { source, id, .. } => format!("/admin/events/{source}/{id}"),
            Action::Requeue { .. } => "/admin".into(),
            #[cfg(feature = "postgres")]
            Action::RetryHandOff => "/admin".into(),
            Action::Destination { .. } => "/admin/destinations".into(),
        }
    }

    /// Does it; returns what happened, as one of [`NOTICES`]' codes.
    pub(super) async fn run(&self, env: &Env, settings: &Settings) -> &'static str {
        let (source, id) = match self {
            Action::Requeue { key } => {
                return match queries::requeue(env, &decode(key)).await {
                    Ok(true) => "requeued",
                    Ok(false) => "not-dead",
                    Err(_) => "not-done",
                };
            }
            Action::Redeliver { delivery, .. } => {
                return match operate::redeliver(env, &decode(delivery)).await {
                    Ok(true) => "redelivered",
                    Ok(false) => "not-redeliverable",
                    Err(_) => "not-done",
                };
            }
            Action::Destination { name, action } => {
                return match operate::destination(env, settings, &decode(name), *action).await {
                    Ok(true) => action.name(),
                    Ok(false) => "unchanged",
                    Err(_) => "not-done",
                };
            }
            #[cfg(feature = "postgres")]
            Action::RetryHandOff => {
                return match super::handoff::retry(env, settings).await {
                    Ok(Some(0) | None) => "unchanged",
                    Ok(Some(_)) => "retried-handoff",
                    Err(_) => "not-done",
                };
            }
            Action::Replay { source, id } | Action::Dismiss { source, id } => {
                (decode(source), decode(id))
            }
        };
        let result = match self {
            Action::Dismiss { .. } => client::dismiss(env, &source, &id).await,
            _ => client::replay(env, &source, &id).await,
        };
        match result {
            Ok(ActionResult::Done(answer)) => match answer.outcome {
                Outcome::Processed => "applied",
                Outcome::Duplicate => "no-op",
                Outcome::Failed => "failed-again",
                Outcome::Accepted => "in-flight",
                Outcome::Dismissed => "dismissed",
            },
            Ok(ActionResult::NoEvent) => "no-event",
            Ok(ActionResult::NotFailed) => "not-failed",
            Ok(ActionResult::Failed(_)) | Err(_) => "not-done",
        }
    }
}

/// What an action did, by the code in the page's `?done=`.
pub(super) const NOTICES: [(&str, &str); 19] = [
    ("applied", "Replayed: the effect was applied, once."),
    ("no-op", "No-op: the effect had already been applied."),
    (
        "failed-again",
        "Replayed: the attempt failed again; the event stays failed.",
    ),
    (
        "in-flight",
        "An attempt is already in flight; look again shortly.",
    ),
    ("dismissed", "Dismissed: the event will not be applied."),
    ("no-event", "The inbox holds no such event."),
    ("not-failed", "Only a failed event can be dismissed."),
    (
        "not-done",
        "Not done: the inbox or D1 did not answer; try again.",
    ),
    (
        "requeued",
        "Requeued: the side effect will be tried again, with the same key.",
    ),
    ("not-dead", "Only a dead side effect can be requeued."),
    (
        "redelivered",
        "Redelivered: it goes out again, under the same webhook-id.",
    ),
    (
        "not-redeliverable",
        "Only a dead or delivered delivery can be redelivered.",
    ),
    (
        "requeue",
        "Requeued: the destination's dead deliveries go out again, oldest first.",
    ),
    (
        "pause",
        "Paused: its deliveries wait, without spending attempts.",
    ),
    (
        "resume",
        "Resumed: its waiting deliveries go out, oldest first.",
    ),
    (
        "enable",
        "Re-enabled: its waiting deliveries go out, oldest first.",
    ),
    (
        "discard",
        "Discarded: the deliveries held for it are dead, and will not be sent.",
    ),
    ("unchanged", "Nothing to change."),
    (
        "retried-handoff",
        "Retried: the relay hands the stuck rows off to D1 again at its next run.",
    ),
];
