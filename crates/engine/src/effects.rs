//! Business effects: what an event changes in D1, planned as SQL statements
//! and applied in ONE batch (one transaction) with the event's ledger row
//! (see `ledger`) and the outbox rows of its side effects (see `outbox`).
//! The ledger row comes first: a second attempt at the event fails on it and
//! rolls back the rest, so each effect happens once.
//!
//! The app's effects are its own ([`App::effects`](crate::App)): a
//! function that reads the event and returns an [`Effect`], its line in
//! the app's table, and its tables in a new migration. Planning is pure,
//! so it is tested on the host; only `ledger::apply` touches D1.

use serde::de::DeserializeOwned;

pub use crate::d1::{Statement, Value};
use crate::event::VerifiedEvent;
use crate::fault::Fault;
use crate::outbox::{self, ChatMessage, SideEffect};
use crate::{forward, ledger};

/// An effect's planner: the event and the time (ms, for rows' timestamps)
/// to what it writes.
pub type Planner = fn(&VerifiedEvent, i64) -> Result<Effect, PlanError>;

/// What an event changes: its writes, and the side effects to perform once
/// they have committed (an email, a chat message: see `outbox`). Built with
/// [`Effect::new`] and [`Effect::with`]; `Effect::default()` changes nothing.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Effect {
    /// The SQL it runs, in order, in the event's one transaction.
    pub(crate) writes: Vec<Statement>,
    /// What to do outside the store once that transaction has committed,
    /// each once under its own idempotency key.
    pub(crate) side_effects: Vec<SideEffect>,
}

impl Effect {
    /// An effect that runs `writes`, in order, in the event's one
    /// transaction (with its ledger row).
    pub fn new(writes: Vec<Statement>) -> Effect {
        Effect {
            writes,
            side_effects: Vec::new(),
        }
    }

    /// The effect, with these side effects too: performed once each, after
    /// the transaction commits. An `Option` gives none or one.
    pub fn with(mut self, side_effects: impl IntoIterator<Item = SideEffect>) -> Effect {
        self.side_effects.extend(side_effects);
        self
    }

    /// Its writes, in order (for an effect's tests).
    pub fn writes(&self) -> &[Statement] {
        &self.writes
    }

    /// Its side effects, in order (for an effect's tests).
    pub fn side_effects(&self) -> &[SideEffect] {
        &self.side_effects
    }
}

/// The event's body lacks what its effect needs. Permanent: retrying the
/// same bytes cannot help, so the receiver answers 400 before claiming. A
/// fixed phrase: the body's own values (an email address) are not echoed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// Not the JSON the effect reads: a field missing or of another type.
    #[error("the body is not what this event's effect reads (line {line}, column {column})")]
    Unreadable {
        /// Where serde stopped reading: the line in the body…
        line: usize,
        /// …and the column.
        column: usize,
    },
    /// Readable, but not what its event type says it is.
    #[error("the body is not {0}")]
    NotA(&'static str),
}

/// An event's effect: the batch to commit, and the keys of the outbox and
/// forward rows it writes (to enqueue once it has committed).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Plan {
    /// The ledger row, the effect's writes, its outbox rows and its
    /// deliveries, in the order they run.
    pub batch: Vec<Statement>,
    /// The idempotency keys of its outbox rows.
    pub outbox_keys: Vec<String>,
    /// The ids of its deliveries to destinations.
    pub forward_ids: Vec<String>,
}

/// An app's table of effects: `(provider, event type, planner)`, one line
/// per effect.
pub type Effects = [(&'static str, &'static str, Planner)];

/// The full batch for an event: the ledger row first, then its writes, then
/// one outbox row per side effect, then its deliveries to destinations (see
/// `forward`). `now` (ms) stamps `processed_at` and the rows. `fault`
/// (end-to-end tests only) may add a test side effect.
pub(crate) fn plan(
    effects: &Effects,
    event: &VerifiedEvent,
    now: i64,
    fault: Option<Fault>,
) -> Result<Plan, PlanError> {
    let mut effect = effect(effects, event, now)?;
    if Fault::wants_side_effect(fault, !effect.side_effects.is_empty()) {
        let text = format!("test side effect of {}", event.key());
        effect.side_effects.push(ChatMessage::new(text).post());
    }
    if fault == Some(Fault::BadStatement) {
        let sql = "SELECT ?1::text AS one, ?2::text AS two";
        effect.writes.push(Statement::new(sql, vec![Value::Int(1)]));
    }
    Ok(batch(event, effect, now))
}

/// The batch `event` commits under the table `effects`: what an app's
/// tests check its effects by.
pub fn plan_with(effects: &Effects, event: &VerifiedEvent, now: i64) -> Result<Plan, PlanError> {
    Ok(batch(event, effect(effects, event, now)?, now))
}

/// The effect `effects` lists for the event's provider and type, planned;
/// none if it lists none.
fn effect(effects: &Effects, event: &VerifiedEvent, now: i64) -> Result<Effect, PlanError> {
    let planner = effects
        .iter()
        .find(|(provider, kind, _)| *provider == event.provider && *kind == event.kind);
    match planner {
        Some((_, _, planner)) => planner(event, now),
        None => Ok(Effect::default()),
    }
}

/// The ledger row, the effect's writes, its outbox rows, its deliveries:
/// one transaction.
fn batch(event: &VerifiedEvent, effect: Effect, now: i64) -> Plan {
    let (outbox_rows, outbox_keys): (Vec<Statement>, Vec<String>) = effect
        .side_effects
        .into_iter()
        .map(|side_effect| outbox::insert(event, side_effect, now))
        .unzip();
    let (forward_rows, forward_ids) = forward::insert(event, now).unzip();
    let batch = std::iter::once(ledger::row(event, now))
        .chain(effect.writes)
        .chain(outbox_rows)
        .chain(forward_rows)
        .collect();
    Plan {
        batch,
        outbox_keys,
        forward_ids: forward_ids.unwrap_or_default(),
    }
}

/// A Stripe event: its creation time and `data.object`.
#[derive(serde::Deserialize)]
#[non_exhaustive]
pub struct StripeEvent<T> {
    /// When Stripe created the event, in seconds since the epoch: what
    /// orders two events about one object.
    pub created: i64,
    /// Its payload.
    pub data: StripeData<T>,
}

/// A Stripe event's `data`.
#[derive(serde::Deserialize)]
#[non_exhaustive]
pub struct StripeData<T> {
    /// The object the event is about (a checkout session, a subscription).
    pub object: T,
}

/// The body as `T`, or why not (its position, not its content).
pub fn parse<T: DeserializeOwned>(body: &str) -> Result<T, PlanError> {
    serde_json::from_str(body).map_err(|e| PlanError::Unreadable {
        line: e.line(),
        column: e.column(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::outbox::ChatMessage;

    pub(crate) fn event(provider: &str, kind: &str, body: &str) -> VerifiedEvent {
        VerifiedEvent::example(provider, kind, body)
    }

    #[test]
    fn an_event_without_an_effect_writes_its_ledger_row_alone() {
        let plan = plan(&[], &event("example", "ping", "{}"), 2_000, None).unwrap();
        assert!(plan.outbox_keys.is_empty());
        assert_eq!(
            plan.batch,
            vec![ledger::row(&event("example", "ping", "{}"), 2_000)]
        );
    }

    #[test]
    fn a_test_fault_adds_a_side_effect_where_the_effect_writes_none() {
        let event = event("example", "ping", "{}");
        for (fault, rows) in [
            (None, 1),
            (Some(Fault::WithSideEffect), 2),
            (Some(Fault::CrashAfterCall), 2),
            (Some(Fault::FailBeforeEffect), 1),
        ] {
            assert_eq!(
                plan(&[], &event, 2, fault).unwrap().batch.len(),
                rows,
                "{fault:?}"
            );
        }
    }

    #[test]
    fn deliveries_commit_in_the_same_batch_after_the_ledger_row() {
        let mut event = event("example", "ping", "{}");
        assert_eq!(plan(&[], &event, 2, None).unwrap().batch.len(), 1);
        event.forward = Some(r#"{"to":["backend"],"headers":[]}"#.into());
        let forwarded = plan(&[], &event, 2, None).unwrap();
        assert_eq!(forwarded.batch.len(), 2);
        assert_eq!(forwarded.batch[0], ledger::row(&event, 2));
        assert!(forwarded.batch[1].sql.starts_with("INSERT INTO forwards"));
        let id = forward::delivery_id("example", "evt_1", "backend");
        assert_eq!(forwarded.forward_ids, [id]);
    }

    #[test]
    fn writes_then_outbox_rows_follow_the_ledger_row() {
        let event = event("example", "thing.happened", "{}");
        let effect = Effect::new(vec![Statement::new(
            "UPDATE things SET n = n + 1",
            Vec::new(),
        )])
        .with([ChatMessage::new("hi").post()]);
        let plan = batch(&event, effect, 2_000);
        assert_eq!(plan.batch.len(), 3);
        assert_eq!(plan.batch[0], ledger::row(&event, 2_000));
        assert_eq!(plan.batch[1].sql, "UPDATE things SET n = n + 1");
        assert!(plan.batch[2].sql.starts_with("INSERT INTO outbox"));
        let key = outbox::idempotency_key("example", "evt_1", "notify_chat");
        assert_eq!(plan.outbox_keys, vec![key.clone()]);
        assert_eq!(plan.batch[2].params[0], Value::Text(key));
    }
}
