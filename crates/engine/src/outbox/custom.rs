//! Side effects of the app's own: registered by name in
//! [`App::side_effects`](crate::App::side_effects), written by an effect with
//! [`SideEffect::custom`], performed by the outbox like the engine's own
//! (claimed, retried, dead-lettered, alerted on), under the row's own
//! idempotency key. Nothing of the app's lives in the engine, so an upgrade
//! replaces the engine whole and the side effect stays.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde::Serialize;
use worker::Env;

use super::{post_json, Action, Call, CallError, Performed, SideEffect};
use crate::config;

/// What performs a side effect of the app's own: its row, to the call.
/// Registered as `("crm_sync", |call| Box::pin(crm_sync(call)))` for an
/// `async fn crm_sync(call: &Perform<'_>) -> Result<(), PerformError>`.
pub type Performer = for<'a> fn(&'a Perform<'a>) -> PerformFuture<'a>;

/// The future a [`Performer`] returns.
pub type PerformFuture<'a> = Pin<Box<dyn Future<Output = Result<(), PerformError>> + 'a>>;

/// Why a side effect of the app's own failed: the row's `last_error`, shown
/// to operators and in the log, so never a secret or a URL with a token.
/// It is retried, then dead-lettered, as the engine's own are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PerformError(String);

impl PerformError {
    /// A failure, in words safe to show operators.
    pub fn new(why: impl Into<String>) -> Self {
        PerformError(why.into())
    }
}

impl From<CallError> for PerformError {
    fn from(error: CallError) -> Self {
        PerformError(error.to_string())
    }
}

/// One attempt at a side effect of the app's own: its payload, its key,
/// and the calls a performer makes with them.
pub struct Perform<'a> {
    payload: &'a str,
    call: &'a Call<'a>,
    /// Set by [`Perform::unconfigured`] when the deployment says
    /// `SIDE_EFFECTS = "log"`: the row is marked sent with this note.
    skipped: RefCell<Option<String>>,
}

impl Perform<'_> {
    /// The payload its effect wrote, as `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, PerformError> {
        serde_json::from_str(self.payload).map_err(|_| CallError::Unreadable.into())
    }

    /// Its idempotency key: the same at every attempt and every copy of the
    /// event. Send it to the target (as `Idempotency-Key`), so that a
    /// retry after a crash does nothing twice.
    pub fn key(&self) -> &str {
        self.call.key
    }

    /// The worker's variable or secret `name`, if set and not blank.
    pub fn var(&self, name: &str) -> Option<String> {
        config::optional(self.call.env, name)
    }

    /// The worker's environment, for a binding of the app's own.
    pub fn env(&self) -> &Env {
        self.call.env
    }

    /// `variable` (its name, never its value) is not set: under
    /// `SIDE_EFFECTS = "log"` (local runs) the side effect is skipped and
    /// marked sent with a note; anywhere else, a failure that retries.
    pub fn unconfigured(&self, variable: &str) -> Result<(), PerformError> {
        match super::unconfigured(self.call, variable)? {
            Performed::Skipped(why) => *self.skipped.borrow_mut() = Some(why),
            Performed::Sent => {}
        }
        Ok(())
    }

    /// POSTs `body` as JSON to `url` with `Idempotency-Key` (and a bearer
    /// token, if given), within the outbox's call timeout. Any answer but
    /// 2xx is a failure to retry; its words never quote the URL.
    pub async fn post_json(
        &self,
        url: &str,
        body: &impl Serialize,
        bearer: Option<&str>,
    ) -> Result<(), PerformError> {
        let body = serde_json::to_string(body).map_err(|_| CallError::Unreadable)?;
        Ok(post_json(url, &body, self.call, bearer).await?)
    }
}

impl SideEffect {
    /// A side effect of the app's own, `name` as registered in
    /// [`App::side_effects`](crate::App::side_effects), with `payload` (JSON)
    /// for its performer. Keyed by the event and `name` (or, with
    /// [`SideEffect::about`], by a business object).
    pub fn custom(name: &'static str, payload: &impl Serialize) -> SideEffect {
        SideEffect::named(name, payload)
    }
}

/// Performs a row whose action is not the engine's: by the app's performer
/// of that name; an unknown one fails (retried, then dead).
pub(super) async fn perform(
    name: &str,
    payload: &str,
    call: &Call<'_>,
) -> Result<Performed, CallError> {
    let performer = crate::app::get()
        .and_then(|app| app.side_effects.iter().find(|(n, _)| *n == name))
        .map(|(_, performer)| *performer)
        .ok_or(CallError::UnknownAction)?;
    let perform = Perform {
        payload,
        call,
        skipped: RefCell::new(None),
    };
    performer(&perform).await.map_err(|e| CallError::App(e.0))?;
    Ok(match perform.skipped.take() {
        Some(why) => Performed::Skipped(why),
        None => Performed::Sent,
    })
}

/// Why the app's side effects cannot be registered as they are: a name
/// that is not `snake_case`, that is the engine's own, or that repeats.
pub(crate) fn refused(side_effects: &[(&'static str, Performer)]) -> Option<String> {
    let snake = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    for (i, (name, _)) in side_effects.iter().enumerate() {
        if !snake(name) {
            return Some(format!(
                "side effect {name:?}: a name is snake_case (a-z, 0-9, _)"
            ));
        }
        if Action::from_stored(name).is_some() {
            return Some(format!("side effect {name}: the engine's own name"));
        }
        if side_effects[..i].iter().any(|(n, _)| n == name) {
            return Some(format!("side effect {name}: registered twice"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn performer(_: &Perform<'_>) -> PerformFuture<'static> {
        Box::pin(async { Ok(()) })
    }

    #[test]
    fn a_custom_side_effect_is_stored_under_its_name() {
        #[derive(Serialize)]
        struct Sync<'a> {
            customer: &'a str,
        }
        let side_effect = SideEffect::custom("crm_sync", &Sync { customer: "c_1" });
        assert_eq!(side_effect.action, "crm_sync");
        assert_eq!(side_effect.payload(), r#"{"customer":"c_1"}"#);
    }

    #[test]
    fn a_name_is_snake_case_its_own_and_once() {
        let ok: &[(&str, Performer)] = &[("crm_sync", performer), ("erp_2", performer)];
        assert_eq!(refused(ok), None);
        for (bad, why) in [
            (&[("Crm", performer as Performer)][..], "snake_case"),
            (&[("", performer as Performer)][..], "snake_case"),
            (
                &[("send_email", performer as Performer)][..],
                "engine's own",
            ),
            (
                &[("send_receipt", performer as Performer)][..],
                "engine's own",
            ),
            (
                &[("a", performer as Performer), ("a", performer as Performer)][..],
                "twice",
            ),
        ] {
            assert!(refused(bad).is_some_and(|e| e.contains(why)), "{why}");
        }
    }
}
