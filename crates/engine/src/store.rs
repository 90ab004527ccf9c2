//! Where an event's effect commits: D1, the default, or your Postgres
//! through Hyperdrive (feature `postgres`, `STORE = "postgres"`). Either
//! way the ledger row, the effect's writes and the outbox rows commit in
//! one transaction; an effect is written once and runs on both.

use std::borrow::Cow;

use worker::Env;

use crate::config::Store;
use crate::d1::{Db, Statement};
use crate::event::VerifiedEvent;
use crate::handoff_rows::Row;
use crate::ledger::{self, Applied};
use crate::migrations::{self, Behind};

/// Why an effect did not commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotApplied {
    /// The store could not be reached or would not serve (down, restarting,
    /// refusing the password): the sender is asked to come back (503 with
    /// `Retry-After`), and the event waits for it, spending no attempt.
    /// Only Postgres tells this apart: D1 is the runtime's own.
    #[cfg_attr(not(feature = "postgres"), expect(dead_code))]
    Unreachable(String),
    /// The store did not answer in time: a 503 too, but an attempt spent,
    /// so that an effect always too slow ends listed as failed.
    #[cfg_attr(not(feature = "postgres"), expect(dead_code))]
    TooSlow(String),
    /// The store lacks one of the engine's migrations: the event waits for
    /// it, spending no attempt, and its sender is told (500
    /// `misconfigured`, naming it).
    Behind(Behind),
    /// The store refused or failed the transaction; the alarm retries.
    Failed(String),
}

/// How an unreachable store's failure begins, as the inbox keeps it.
const UNAVAILABLE: &str = "store unavailable: ";

/// Whether an inbox's last error says its store could not be reached.
pub(crate) fn is_unavailable(last_error: &str) -> bool {
    last_error.starts_with(UNAVAILABLE)
}

impl NotApplied {
    /// As the inbox keeps it (its last error): an unreachable store's
    /// begins with [`UNAVAILABLE`].
    pub(crate) fn message(&self) -> String {
        match self {
            NotApplied::Unreachable(why) | NotApplied::TooSlow(why) => {
                format!("{UNAVAILABLE}{why}")
            }
            NotApplied::Behind(behind) => behind.message(),
            NotApplied::Failed(why) => why.clone(),
        }
    }
}

/// Commits `batch` (see `effects::plan`) for `event` in `store`. Returns, with the outcome, the
/// rows D1's engine tables are owed of an effect committed elsewhere (see
/// `handoff_rows`): none on D1.
pub(crate) async fn apply(
    env: &Env,
    store: Store,
    event: &VerifiedEvent,
    batch: &[Statement],
) -> Result<(Applied, Vec<Row>), NotApplied> {
    let failed = |e: worker::Error| NotApplied::Failed(crate::d1::said(&e));
    match store {
        Store::D1 => {
            let db = Db::from_env(env).map_err(failed)?;
            if let Some(behind) = d1_behind(&db).await {
                return Err(NotApplied::Behind(behind));
            }
            let batch = without_row_locks(batch).map_err(|(sql, why)| {
                NotApplied::Failed(format!("{why}: {}", crate::d1::shown(sql)))
            })?;
            let applied = ledger::apply(&db, event, &batch).await;
            Ok((applied.map_err(failed)?, Vec::new()))
        }
        #[cfg(feature = "postgres")]
        Store::Postgres => {
            use crate::postgres::PgError;
            // D1 takes the hand-off: its engine tables are needed too.
            if let Some(behind) = d1_behind(&Db::from_env(env).map_err(failed)?).await {
                return Err(NotApplied::Behind(behind));
            }
            crate::postgres::apply(env, event, batch)
                .await
                .map_err(|e| match e {
                    PgError::Unavailable(_) => NotApplied::Unreachable(e.message()),
                    PgError::Slow(_) => NotApplied::TooSlow(e.message()),
                    PgError::Refused(_) => NotApplied::Failed(e.message()),
                    PgError::Behind(behind) => NotApplied::Behind(behind),
                })
        }
        // Refused by the settings before any event gets here.
        #[cfg(not(feature = "postgres"))]
        Store::Postgres => Err(NotApplied::Failed(NEEDS_FEATURE.into())),
    }
}

/// The first of the engine's D1 migrations that D1 lacks, probed once per
/// isolate (one batch; each probe alone only when it fails). Any other
/// failure leaves the check for the next event: the effect's own batch
/// then says what went wrong.
async fn d1_behind(db: &Db) -> Option<Behind> {
    let probes = migrations::unchecked(Store::D1);
    if probes.is_empty() {
        return None;
    }
    let statement = |m: &migrations::Migration| Statement::new(m.probe, Vec::new());
    let all: Vec<Statement> = probes.iter().map(statement).collect();
    match db.probe(&all).await {
        Ok(()) => migrations::passed(Store::D1),
        Err(e) if migrations::d1_missing(&e.to_string()) => {
            for migration in probes {
                if let Err(e) = db.probe(&[statement(migration)]).await {
                    return Some(migrations::behind(migration, e.to_string()));
                }
            }
        }
        Err(_) => {}
    }
    None
}

/// A row lock ([`Statement::for_update`]) keeps two events' Postgres
/// transactions from writing one row at once (docs/postgres.md); D1 runs
/// each batch alone and knows no `FOR UPDATE`, so it is left out there.
/// One effect, either store. A write marked as a lock is refused, never
/// left out.
/// Refused: the statement marked by mistake, and why.
pub(crate) fn without_row_locks(
    batch: &[Statement],
) -> Result<Cow<'_, [Statement]>, (&'static str, String)> {
    for statement in batch {
        if let Some(why) = statement.misplaced_lock() {
            return Err((statement.sql, why));
        }
    }
    if !batch.iter().any(|s| s.for_update) {
        return Ok(Cow::Borrowed(batch));
    }
    Ok(Cow::Owned(
        batch.iter().filter(|s| !s.for_update).cloned().collect(),
    ))
}

#[cfg(not(feature = "postgres"))]
const NEEDS_FEATURE: &str = "STORE = \"postgres\" needs the cargo feature `postgres`";

/// Postgres's ledger, where D1's copy of it may lag (see
/// `postgres::handoff`): whether it holds `event` as an operator's
/// dismissal.
pub(crate) async fn postgres_dismissed(env: &Env, event: &VerifiedEvent) -> worker::Result<bool> {
    #[cfg(feature = "postgres")]
    return crate::postgres::dismissed(env, event)
        .await
        .map_err(into_error);
    #[cfg(not(feature = "postgres"))]
    return Err(refused(env, event));
}

/// Whether Postgres's ledger holds `event` (or its signed body), having
/// handed off what an earlier attempt left.
pub(crate) async fn postgres_handled(env: &Env, event: &VerifiedEvent) -> worker::Result<bool> {
    #[cfg(feature = "postgres")]
    return crate::postgres::handled(env, event)
        .await
        .map_err(into_error);
    #[cfg(not(feature = "postgres"))]
    return Err(refused(env, event));
}

/// Records an operator's dismissal of `event` in Postgres's ledger.
pub(crate) async fn postgres_dismiss(env: &Env, event: &VerifiedEvent) -> worker::Result<Applied> {
    #[cfg(feature = "postgres")]
    return crate::postgres::dismiss(env, event)
        .await
        .map_err(into_error);
    #[cfg(not(feature = "postgres"))]
    return Err(refused(env, event));
}

#[cfg(feature = "postgres")]
fn into_error(error: crate::postgres::PgError) -> worker::Error {
    error.message().into()
}

#[cfg(not(feature = "postgres"))]
fn refused(_: &Env, _: &VerifiedEvent) -> worker::Error {
    NEEDS_FEATURE.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_lock_is_left_out_of_a_d1_batch_by_its_flag_not_its_text() {
        let lock =
            Statement::new("SELECT balance FROM accounts WHERE id = ?1", vec![]).for_update();
        let write = Statement::new(
            "UPDATE accounts SET balance = balance + ?2 WHERE id = ?1",
            vec![],
        );
        // Text is not a flag: SQLite refuses it, and the harness says so.
        let text = Statement::new("SELECT 1 FROM accounts\nFOR UPDATE NOWAIT", vec![]);
        let batch = [lock, write.clone(), text.clone()];
        let d1 = without_row_locks(&batch).unwrap();
        assert_eq!(d1.as_ref(), [write.clone(), text]);
        assert!(matches!(
            without_row_locks(std::slice::from_ref(&write)),
            Ok(Cow::Borrowed(_))
        ));
        let marked = write.for_update();
        let (sql, why) = without_row_locks(&[marked]).unwrap_err();
        let refused = format!("{why}: {sql}");
        assert!(
            refused.ends_with(
                "only a SELECT can be: UPDATE accounts SET balance = balance + ?2 WHERE id = ?1"
            ),
            "{refused}"
        );
    }
}
