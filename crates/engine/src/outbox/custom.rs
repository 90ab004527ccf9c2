//! Side effects of the app's own: registered by name in
//! [`App::side_effects`](crate::App::side_effects), written by an effect with
//! [`SideEffect::custom`], performed by the outbox like the engine's own
//! (claimed, retried, dead-lettered, alerted on), under the row's own
//! idempotency key and within the same call timeout. Nothing of the app's
//! lives in the engine, so an upgrade replaces the engine whole and the
//! side effect stays. Rows name them `app:{name}`: no action of the
//! engine's, today's or a later release's, can take them over.

use std::cell::RefCell;
use std::future::Future;
use std::pin::{pin, Pin};
use std::time::Duration;

use futures_util::future::{select, Either};

use serde::de::DeserializeOwned;
use serde::Serialize;
use worker::Env;

use super::{post_json, Call, CallError, Performed, SideEffect};
use crate::config;

/// How a row names an action of the app's own: `app:crm_contact`.
pub(super) const PREFIX: &str = "app:";

/// The longest failure text a row keeps of a performer's words.
const MAX_ERROR_CHARS: usize = 500;

/// What performs a side effect of the app's own: its row, to the call. It
/// has the outbox's call timeout (half the row's lease); past it, the
/// attempt fails and is retried under the same key, though a request
/// already sent may still arrive: the target must honour the key.
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
    /// Return it (`return call.unconfigured("CRM_URL")`): the performer
    /// has nothing to call.
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
    /// [`SideEffect::about`], by a business object): one per name and
    /// event, unless `about` tells them apart.
    pub fn custom(name: &'static str, payload: &impl Serialize) -> SideEffect {
        SideEffect {
            app: true,
            ..SideEffect::named(name, payload)
        }
    }
}

/// Performs a row of the app's action `name` by its performer, within the
/// call timeout (half the row's lease, so that no other consumer claims it
/// meanwhile); an unknown name fails (retried, then dead).
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
    let deadline = worker::Delay::from(Duration::from_millis(call.timeout_ms.into()));
    match select(pin!(performer(&perform)), pin!(deadline)).await {
        Either::Left((done, _)) => done.map_err(|e| CallError::App(bounded(e.0)))?,
        Either::Right(_) => return Err(CallError::TimedOut(call.timeout_ms)),
    }
    Ok(match perform.skipped.take() {
        Some(why) => Performed::Skipped(why),
        None => Performed::Sent,
    })
}

/// A performer's words, cut to what a row and an alert keep.
fn bounded(why: String) -> String {
    match why.char_indices().nth(MAX_ERROR_CHARS) {
        Some((at, _)) => format!("{}…", &why[..at]),
        None => why,
    }
}

/// Why the app's side effects cannot be registered as they are: a name
/// that is not `snake_case`, or one registered twice (its first performer
/// would take both's rows).
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
        if side_effects[..i].iter().any(|(n, _)| n == name) {
            return Some(format!("side effect {name}: registered twice"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::d1::Value;
    use crate::event::VerifiedEvent;

    fn performer(_: &Perform<'_>) -> PerformFuture<'static> {
        Box::pin(async { Ok(()) })
    }

    #[test]
    fn a_custom_side_effect_is_stored_as_the_app_s_whatever_its_name() {
        #[derive(Serialize)]
        struct Sync<'a> {
            customer: &'a str,
        }
        // Even under a name the engine has: the app's performer runs it.
        let side_effect = SideEffect::custom("send_email", &Sync { customer: "c_1" });
        assert_eq!(side_effect.payload(), r#"{"customer":"c_1"}"#);
        let event = VerifiedEvent::example("stripe", "customer.created", "{}");
        let (row, _) = super::super::insert(&event, side_effect, 1);
        assert_eq!(row.params[3], Value::Text("app:send_email".into()));
    }

    #[test]
    fn a_name_is_snake_case_and_registered_once() {
        let ok: &[(&str, Performer)] = &[("crm_sync", performer), ("send_email", performer)];
        assert_eq!(refused(ok), None);
        for (bad, why) in [
            (&[("Crm", performer as Performer)][..], "snake_case"),
            (&[("", performer as Performer)][..], "snake_case"),
            (
                &[("a", performer as Performer), ("a", performer as Performer)][..],
                "twice",
            ),
        ] {
            assert!(refused(bad).is_some_and(|e| e.contains(why)), "{why}");
        }
    }

    #[test]
    fn a_performer_s_words_are_cut_to_what_a_row_keeps() {
        assert_eq!(bounded("short".into()), "short");
        let cut = bounded("é".repeat(MAX_ERROR_CHARS + 10));
        assert_eq!(cut.chars().count(), MAX_ERROR_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
