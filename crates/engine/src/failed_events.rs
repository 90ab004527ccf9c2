//! The operators' list of events whose effect never committed (D1
//! `failed_events`). Written only on the rare path — when an inbox spends its
//! retry budget, when a later attempt succeeds, when an operator dismisses
//! one — so the delivery path never touches it.
//!
//! Every write returns its error: the inbox keeps whether its failure was
//! reported and retries the report from its alarm until it is written, so an
//! event cannot fail unseen while D1 is down.

use worker::{Env, Result};

use crate::clock::now_ms;
use crate::config::Store;
use crate::d1::{Db, Statement};
use crate::event::VerifiedEvent;
use crate::ledger::{self, Applied};
use crate::outbox;
use crate::outbox::notify_operator::{self, Alert};
use crate::settings::Settings;
use crate::store;

/// What [`record`] did.
pub enum Recorded {
    /// The event is on the failed list.
    Listed,
    /// The ledger holds the event (its effect committed after all, or an
    /// operator dismissed it): nothing was listed.
    AlreadyHandled,
}

/// Lists the event as failed (again: a new failure clears a dismissal),
/// unless the ledger already holds it, under its id or its signed body's
/// fence — so a report that arrives late cannot list an event that was
/// applied, dismissed, or found to be a replayed body meanwhile. A newly
/// listed event is counted in the trend and alerted, in the same
/// transaction.
pub async fn record(
    env: &Env,
    settings: &Settings,
    event: &VerifiedEvent,
    error: &str,
) -> Result<Recorded> {
    // In Postgres, the ledger's own word: D1's copy may not have it yet.
    let store = settings.inbox().map(|inbox| inbox.store);
    if store == Ok(Store::Postgres) && store::postgres_handled(env, event).await? {
        return Ok(Recorded::AlreadyHandled);
    }
    let now = now_ms();
    // First, while the list does not show it yet: one more failure in the
    // dashboard's trend (a report retried after a lost answer counts once).
    let trend = Statement::new(
        "INSERT INTO delivery_trend (minute, source, outcome, value) \
         SELECT ?3, ?1, 'failed', 1 WHERE NOT EXISTS \
           (SELECT 1 FROM processed_events WHERE source = ?1 AND event_id = ?2) \
         AND NOT EXISTS (SELECT 1 FROM processed_events WHERE source = ?1 AND fence_sha256 = ?4) \
         AND NOT EXISTS (SELECT 1 FROM failed_events WHERE source = ?1 AND event_id = ?2 \
           AND dismissed_at IS NULL) \
         ON CONFLICT (minute, source, outcome) DO UPDATE SET value = value + 1",
        vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            now.div_euclid(60_000).into(),
            event.fence.as_deref().into(),
        ],
    );
    let list = Statement::new(
        "INSERT OR REPLACE INTO failed_events \
         (source, event_id, type, received_at, failed_at, last_error) \
         SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE NOT EXISTS \
           (SELECT 1 FROM processed_events WHERE source = ?1 AND event_id = ?2) \
         AND NOT EXISTS (SELECT 1 FROM processed_events WHERE source = ?1 AND fence_sha256 = ?7)",
        vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            event.kind.as_str().into(),
            event.received_at.into(),
            now.into(),
            error.into(),
            event.fence.as_deref().into(),
        ],
    );
    // And, on the same condition, the operators' alert (one per bucket).
    let alert = Alert::EventFailed {
        source: &event.source,
        event_id: &event.id,
        kind: &event.kind,
        error,
    };
    let (alert, alert_key) = alert.row(&notify_operator::settings(settings), now);
    let changes = Db::from_env(env)?
        .batch_changes(&[trend, alert, list])
        .await?;
    if changes.get(1).is_some_and(|n| *n > 0) {
        outbox::enqueue_now(env, alert_key).await;
    }
    Ok(if changes.get(2).is_some_and(|n| *n > 0) {
        Recorded::Listed
    } else {
        Recorded::AlreadyHandled
    })
}

/// The effect committed after all: the event is no longer a failure. A
/// dismissal's row stays: it is the record of that decision.
pub async fn resolve(env: &Env, source: &str, event_id: &str) -> Result<()> {
    let statement = Statement::new(
        "DELETE FROM failed_events WHERE source = ?1 AND event_id = ?2 AND dismissed_at IS NULL",
        vec![source.into(), event_id.into()],
    );
    Db::from_env(env)?.run(&statement).await.map(drop)
}

/// An operator decided not to apply the event: its row here stays, as the
/// record of that decision, and leaves the list of failures to act on; and
/// in the same transaction the ledger records the event as handled, so that
/// no later copy applies it — not even after its inbox has forgotten it.
/// `Applied::Now` when dismissed, now or by an earlier dismissal whose
/// reply was lost; `Earlier` or `Replayed` when the ledger shows the effect
/// committed after all (nothing was dismissed: the row is resolved
/// instead). The row is written if the failure's report never was
/// (`error`: the event's last), so that the decision is always on record:
/// it is how a lost reply is told from an applied effect.
/// With `STORE = "postgres"` the ledger row is Postgres's, marked as a
/// dismissal, and committed before D1 records the decision; a retry after
/// a lost reply finds the mark there.
pub async fn dismiss(
    env: &Env,
    store: Store,
    event: &VerifiedEvent,
    error: &str,
) -> Result<Applied> {
    let now = now_ms();
    let record = Statement::new(
        "INSERT INTO failed_events \
         (source, event_id, type, received_at, failed_at, last_error, dismissed_at) \
         VALUES (?1, ?2, ?4, ?5, ?3, ?6, ?3) \
         ON CONFLICT (source, event_id) DO UPDATE SET dismissed_at = excluded.dismissed_at",
        vec![
            event.source.as_str().into(),
            event.id.as_str().into(),
            now.into(),
            event.kind.as_str().into(),
            event.received_at.into(),
            error.into(),
        ],
    );
    let db = Db::from_env(env)?;
    if store == Store::Postgres {
        let applied = store::postgres_dismiss(env, event).await?;
        if applied == Applied::Now || dismissed(env, store, event).await? {
            db.run(&record).await?;
            return Ok(Applied::Now);
        }
        resolve(env, &event.source, &event.id).await?;
        return Ok(applied);
    }
    let batch = [ledger::row(event, now), record];
    let applied = ledger::apply(&db, event, &batch).await?;
    if applied == Applied::Now {
        return Ok(applied);
    }
    if dismissed(env, store, event).await? {
        return Ok(Applied::Now);
    }
    resolve(env, &event.source, &event.id).await?;
    Ok(applied)
}

/// Whether an operator's dismissal of the event committed (its reply may
/// have been lost): the ledger then holds the event, unapplied.
pub async fn dismissed(env: &Env, store: Store, event: &VerifiedEvent) -> Result<bool> {
    if store == Store::Postgres {
        return store::postgres_dismissed(env, event).await;
    }
    let dismissed = Statement::new(
        "SELECT 'yes' AS dismissed FROM failed_events \
         WHERE source = ?1 AND event_id = ?2 AND dismissed_at IS NOT NULL",
        vec![event.source.as_str().into(), event.id.as_str().into()],
    );
    Ok(Db::from_env(env)?
        .text(&dismissed, "dismissed")
        .await?
        .is_some())
}
