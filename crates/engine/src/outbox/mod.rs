//! Side effects through an outbox on Cloudflare Queues.
//!
//! An email or a third-party call cannot be rolled back, so it never runs in
//! the effect path. The effect batch writes it as intent — an `outbox` row —
//! in the same D1 transaction as the ledger row, so the intent exists exactly
//! when the effect does. After the commit the inbox sends the row's key to
//! the queue; the consumer (`consumer.rs`) claims the row, performs the call with the
//! row's own idempotency key, and marks it sent; the cron relay (`relay.rs`) re-sends
//! rows whose message was lost.
//!
//! Every step may repeat, and none does harm twice:
//! - the queue delivers at least once, and the relay re-sends: the consumer
//!   claims a row with a conditional UPDATE, so one run performs it at a
//!   time, and a `sent` row is only acknowledged;
//! - a crash after the call but before `sent` re-performs the call with the
//!   *same* key (derived from source, event id and action, never from the
//!   attempt), and the provider's idempotency absorbs it.
//!
//! Effects write side effects as the public payload types here: an
//! [`Email`], a [`ChatMessage`], an [`HttpCall`] to an API of your own, or
//! a side effect of the app's own ([`SideEffect::custom`], performed by the
//! [`Performer`] the app registers in [`App::side_effects`](crate::App::side_effects)).

mod alert;
mod call_http;
mod claims;
pub(crate) mod consumer;
mod custom;
mod dead_letter;
mod notify_chat;
pub(crate) mod notify_operator;
mod queue;
pub(crate) mod relay;
mod send_email;

pub use call_http::HttpCall;
pub(crate) use custom::refused as refused_side_effects;
pub use custom::{Perform, PerformError, PerformFuture, Performer};
pub use notify_chat::ChatMessage;
pub(crate) use queue::{enqueue, enqueue_now};
pub(crate) use queue::{send_after_commit, send_jobs, Job};
pub use send_email::Email;

use serde::Serialize;
use sha2::{Digest, Sha256};
use worker::{web_sys, Env, Fetch};

use crate::d1::Statement;
use crate::event::VerifiedEvent;
use crate::http;
use crate::names::named_enum;
use crate::settings::Settings;

named_enum! {
    /// Every kind of side effect. Its name (the variant in snake_case) is what
    /// rows carry and what idempotency keys are derived from.
    pub(crate) enum Action {
        /// Send an [`Email`] (`send_email.rs`).
        SendEmail = "send_email",
        /// Post a [`ChatMessage`] (`notify_chat.rs`).
        NotifyChat = "notify_chat",
        /// Make an [`HttpCall`] (`call_http.rs`).
        CallHttp = "call_http",
        /// Alert the operators (`notify_operator.rs`): written by the receiver
        /// itself, not by an effect.
        NotifyOperator = "notify_operator",
    }
}

impl Action {
    /// Performs the call a row of this action describes.
    async fn perform(self, payload: &str, call: &Call<'_>) -> Result<Performed, CallError> {
        match self {
            Action::SendEmail => send_email::perform(payload, call).await,
            Action::NotifyChat => notify_chat::perform(payload, call).await,
            Action::CallHttp => call_http::perform(payload, call).await,
            Action::NotifyOperator => notify_operator::perform(payload, call).await,
        }
    }

    /// The action a row names: by today's name, or by one an earlier
    /// release stored.
    pub fn from_stored(name: &str) -> Option<Action> {
        Action::from_name(name).or_else(|| {
            let renamed = RENAMED.iter().find(|(old, _)| *old == name);
            renamed.map(|(_, action)| *action)
        })
    }
}

/// Actions an earlier release stored under another name.
const RENAMED: &[(&str, Action)] = &[("send_receipt", Action::SendEmail)];

named_enum! {
    /// The states of an outbox row.
    pub(crate) enum OutboxStatus {
        /// Due at `next_attempt_at`.
        Pending = "pending",
        /// Claimed by a consumer run until `lease_until`.
        Sending = "sending",
        Sent = "sent",
        /// Out of attempts; an operator may requeue it.
        Dead = "dead",
    }
}

/// Why a call to a side effect's target failed: what the row's
/// `last_error`, the log and the operators' alert say. A fixed phrase: the
/// runtime's own error text can quote the URL, and webhook URLs carry
/// tokens.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CallError {
    /// The target's variable is unset, and the deployment does not say
    /// `SIDE_EFFECTS = "log"`.
    /// Holds the variable's name, never its value.
    #[error("{0} is not set (set it, or SIDE_EFFECTS = \"log\" to skip)")]
    Unconfigured(String),
    /// The row names an action this worker has no performer for.
    #[error("no performer for this row's action")]
    UnknownAction,
    /// A side effect of the app's own failed, in its performer's words.
    #[error("{0}")]
    App(String),
    /// The row's payload is not its action's payload type.
    #[error("unreadable payload")]
    Unreadable,
    #[error("invalid target URL")]
    InvalidUrl,
    #[error("target timed out after {0} ms")]
    TimedOut(u32),
    #[error("target unreachable")]
    Unreachable,
    /// Any answer but 2xx.
    #[error("target answered {0}")]
    Answered(u16),
}

/// An intended side effect, produced while planning an event's effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideEffect {
    /// Its action's name: the engine's (`send_email`) or, with `app`, the
    /// app's own.
    pub(crate) action: &'static str,
    /// An action of the app's own: stored as `app:{action}`, so that no
    /// action of the engine's, today's or a later one's, can take its rows.
    pub(crate) app: bool,
    /// JSON: everything the performer needs, fixed at planning time.
    pub(crate) payload: String,
    /// The business object it concerns, as `(kind, id)`, when there is one
    /// (a purchase). Its key is then derived from the object, not the
    /// event: the same purchase seen through two events or two sources (an
    /// endpoint migration) sends one email.
    pub(crate) about: Option<(&'static str, String)>,
    /// What tells two side effects of one action and one event apart (an
    /// [`HttpCall`]'s target), part of the key; `None`: one per action.
    pub(crate) target: Option<String>,
}

impl SideEffect {
    pub(crate) fn new(action: Action, payload: &impl Serialize) -> Self {
        SideEffect::named(action.name(), payload)
    }

    fn named(action: &'static str, payload: &impl Serialize) -> Self {
        SideEffect {
            action,
            app: false,
            // Plain structs of strings: serialization cannot fail.
            payload: serde_json::to_string(payload).expect("payload serializes"),
            about: None,
            target: None,
        }
    }

    /// The JSON its row stores: what its performer reads (an [`Email`]).
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// Keys the side effect by a business object (see [`SideEffect::about`]).
    pub fn about(mut self, kind: &'static str, id: &str) -> Self {
        self.about = Some((kind, id.to_string()));
        self
    }
}

/// How a performer ended.
pub(crate) enum Performed {
    Sent,
    /// Not configured, and the deployment said `SIDE_EFFECTS = "log"`:
    /// nothing to call. Marked sent, with this note, so that a local run
    /// with no accounts still completes.
    Skipped(String),
}

/// A performer found its target's variable (`variable`: its name, never a
/// value) unset. Skipped only where the deployment says so
/// (`SIDE_EFFECTS = "log"`, as in `.dev.vars.example`); anywhere else a
/// failure that retries and dead-letters like any other, so a deploy that
/// forgot a variable cannot silently drop emails.
pub(crate) fn unconfigured(call: &Call, variable: &str) -> Result<Performed, CallError> {
    if call.settings.side_effects_log {
        Ok(Performed::Skipped(format!("{variable} is not set")))
    } else {
        Err(CallError::Unconfigured(variable.to_string()))
    }
}

/// What a performer needs besides its payload.
pub(crate) struct Call<'a> {
    /// Where a performer reads its target's variable (by the name its row
    /// carries: an [`HttpCall`] names its own).
    pub env: &'a Env,
    /// The isolate's settings.
    pub settings: &'a Settings,
    /// The row's idempotency key, sent as `Idempotency-Key`.
    pub key: &'a str,
    /// When to give up on the target (see `OutboxSettings::call_timeout_ms`).
    pub timeout_ms: u32,
}

/// `sha256(source \n event id \n action)`, hex: the same for every attempt
/// and every copy of the event, and distinct per action.
pub(crate) fn idempotency_key(source: &str, event_id: &str, action: &str) -> String {
    let digest = Sha256::new()
        .chain_update(source)
        .chain_update("\n")
        .chain_update(event_id)
        .chain_update("\n")
        .chain_update(action)
        .finalize();
    hex::encode(digest)
}

/// A row keyed by a business object may exist already (written by another
/// event about the same object): then this one is not written again.
pub(crate) const INSERT_ROW: &str = "INSERT INTO outbox \
     (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?6) ON CONFLICT (idempotency_key) DO NOTHING";

/// The outbox row for a side effect, for the effect batch, and its key.
pub(crate) fn insert(
    event: &VerifiedEvent,
    side_effect: SideEffect,
    now: i64,
) -> (Statement, String) {
    let action = match side_effect.app {
        true => format!("{}{}", custom::PREFIX, side_effect.action),
        false => side_effect.action.to_string(),
    };
    let keyed_as = match &side_effect.target {
        Some(target) => format!("{action} {target}"),
        None => action.to_string(),
    };
    let key = match &side_effect.about {
        Some((kind, id)) => idempotency_key(kind, id, &keyed_as),
        None => idempotency_key(&event.source, &event.id, &keyed_as),
    };
    let statement = Statement::new(
        INSERT_ROW,
        vec![
            key.as_str().into(),
            event.source.as_str().into(),
            event.id.as_str().into(),
            action.as_str().into(),
            side_effect.payload.into(),
            now.into(),
        ],
    );
    (statement, key)
}

/// POSTs JSON with the idempotency key, aborted after the call's timeout.
/// Any answer but 2xx is a failure to retry.
async fn post_json(
    url: &str,
    body: &str,
    call: &Call<'_>,
    bearer: Option<&str>,
) -> Result<(), CallError> {
    let authorization = bearer.map(|token| format!("Bearer {token}"));
    let mut headers = vec![
        ("content-type", "application/json"),
        ("idempotency-key", call.key),
    ];
    headers.extend(authorization.as_deref().map(|a| ("authorization", a)));
    let request = http::post(url, body, &headers).map_err(|_| CallError::InvalidUrl)?;
    let signal = web_sys::AbortSignal::timeout_with_u32(call.timeout_ms);
    let response = Fetch::Request(request)
        .send_with_signal(&signal.clone().into())
        .await
        .map_err(|_| {
            if signal.aborted() {
                CallError::TimedOut(call.timeout_ms)
            } else {
                CallError::Unreachable
            }
        })?;
    match response.status_code() {
        200..=299 => Ok(()),
        status => Err(CallError::Answered(status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_stable_and_distinct_per_action() {
        let a = idempotency_key("beta", "evt_1", "send_email");
        assert_eq!(a, idempotency_key("beta", "evt_1", "send_email"));
        assert_eq!(a.len(), 64);
        assert_ne!(a, idempotency_key("beta", "evt_1", "notify_chat"));
        assert_ne!(a, idempotency_key("beta", "evt_2", "send_email"));
        // The separator keeps ("a", "bc") and ("ab", "c") apart.
        assert_ne!(
            idempotency_key("a", "bc", "x"),
            idempotency_key("ab", "c", "x")
        );
    }

    #[test]
    fn the_key_is_sha256_of_the_joined_parts() {
        // printf 'beta\nevt_1\nsend_email' | sha256sum
        assert_eq!(
            idempotency_key("beta", "evt_1", "send_email"),
            "d6e2b092b240fc8af8cafd0f0402089ab188c5987e6ff6545d895e3d81013e00"
        );
    }

    #[test]
    fn actions_are_named_in_snake_case_both_ways() {
        for (action, name) in [
            (Action::SendEmail, "send_email"),
            (Action::NotifyChat, "notify_chat"),
            (Action::NotifyOperator, "notify_operator"),
        ] {
            assert_eq!(action.name(), name);
            assert_eq!(Action::from_stored(name), Some(action));
        }
        assert_eq!(Action::from_stored("launch_rockets"), None);
        for (old, action) in RENAMED {
            assert_eq!(Action::from_stored(old), Some(*action));
        }
    }

    #[test]
    fn statuses_decode_from_their_stored_names() {
        let statuses: Vec<OutboxStatus> =
            serde_json::from_str(r#"["pending","sending","sent","dead"]"#).unwrap();
        assert_eq!(
            statuses,
            [
                OutboxStatus::Pending,
                OutboxStatus::Sending,
                OutboxStatus::Sent,
                OutboxStatus::Dead
            ]
        );
    }
}
