//! One event in one Postgres transaction, in one round trip: `BEGIN`, the
//! ledger row, the effect's writes, the hand-off rows and `COMMIT`, sent
//! together (see `pipeline`). The ledger row is a plain `INSERT`: should
//! the ledger hold the event already (an earlier attempt, or its signed
//! body under another id), its unique key refuses it, Postgres aborts the
//! transaction, refuses the writes after it, and answers the `COMMIT` with
//! a rollback. Nothing of a duplicate is written, and only then is a second
//! round trip spent, to learn which row it clashed with. What cannot be
//! sent at all is refused before anything is.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row as PgRow};
use worker::Env;

use super::handoff;
use super::pipeline::Pipeline;
use super::{begin, sql, with_client, PgError};
use crate::clock::now_ms;
use crate::d1::Statement;
use crate::event::VerifiedEvent;
use crate::handoff_rows::{self, Row};
use crate::ledger::{self, Applied};

/// The ledger row, in D1's column order (see `ledger::row`). Refused by
/// the ledger's unique keys when it holds the event (SQLSTATE 23505).
pub(crate) const LEDGER_INSERT: &str = "INSERT INTO processed_events \
     (source, event_id, type, received_at, processed_at, fence_sha256) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// An operator's dismissal: the ledger row, marked, so that no later copy
/// applies the event, and so that it is told from an applied one.
const LEDGER_DISMISS: &str = "INSERT INTO processed_events \
     (source, event_id, type, received_at, processed_at, fence_sha256, dismissed_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $5)";

const DISMISSED: &str = "SELECT event_id FROM processed_events \
     WHERE source = $1 AND event_id = $2 AND dismissed_at IS NOT NULL";

/// A unique key refused a row.
const UNIQUE_VIOLATION: &str = "23505";

/// Applies `batch` (as `effects::plan` made it: the ledger row, the
/// effect's writes, the outbox rows and deliveries) for `event`. Returns
/// the rows it committed for D1, which ride on the event's messages (see
/// `handoff_rows`); what an earlier attempt left is copied here.
pub(crate) async fn apply(
    env: &Env,
    event: &VerifiedEvent,
    batch: &[Statement],
) -> Result<(Applied, Vec<Row>), PgError> {
    transact(env, event, LEDGER_INSERT, batch).await
}

/// Records an operator's dismissal of `event` in the ledger, and copies
/// its ledger row to D1 (no message carries it): `Now`, or what the
/// ledger held already.
pub(crate) async fn dismiss(env: &Env, event: &VerifiedEvent) -> Result<Applied, PgError> {
    let (applied, owed) =
        transact(env, event, LEDGER_DISMISS, &[ledger::row(event, now_ms())]).await?;
    handoff_rows::deliver(env, &owed).await;
    Ok(applied)
}

/// Whether the ledger holds `event` as dismissed. Read in a transaction,
/// as every read here: Hyperdrive's query cache must not answer it.
pub(crate) async fn dismissed(env: &Env, event: &VerifiedEvent) -> Result<bool, PgError> {
    with_client(env, async |client: &Client| {
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&event.source, Type::TEXT), (&event.id, Type::TEXT)];
        let mut pipeline = Pipeline::new(client);
        let begun = begin(&mut pipeline);
        let rows = pipeline.query(DISMISSED, &params);
        let committed = pipeline.commit();
        let mut answers = pipeline.answers().await;
        begun.check(&mut answers)?;
        let rows = answers.take(rows)?;
        answers.take(committed)?;
        Ok(!rows.is_empty())
    })
    .await
}

/// Whether the ledger holds `event` (or its signed body under another
/// id); what an earlier attempt left to hand off is handed off.
pub(crate) async fn handled(env: &Env, event: &VerifiedEvent) -> Result<bool, PgError> {
    let (holder, pending) =
        with_client(env, async |client: &Client| held(client, event).await).await?;
    if holder.as_deref() == Some(event.id.as_str()) {
        handoff_rows::deliver(env, &pending).await;
    }
    Ok(holder.is_some())
}

/// `batch` in one transaction, its ledger row written by `ledger_sql`,
/// the connection closed; returns the hand-off rows it wrote. Once
/// `COMMIT` is acknowledged the effect is applied, whatever befalls the
/// hand-off (it is done again by the next attempt, or the relay). On a
/// clash, what the earlier attempt left is copied to D1 here.
async fn transact(
    env: &Env,
    event: &VerifiedEvent,
    ledger_sql: &'static str,
    batch: &[Statement],
) -> Result<(Applied, Vec<Row>), PgError> {
    let (ledger, rest) = batch
        .split_first()
        .ok_or_else(|| PgError::Refused("an empty batch".into()))?;
    let writes: Vec<&Statement> = rest
        .iter()
        .filter(|s| Row::of(event, s).is_none())
        .collect();
    if let Some(why) = sql::refusal(&writes) {
        return Err(PgError::Refused(why));
    }
    let rows: Vec<Row> = batch.iter().filter_map(|s| Row::of(event, s)).collect();
    let outcome = with_client(env, async |client: &Client| {
        match commit(client, event, (ledger_sql, ledger), &writes, &rows).await? {
            Some(written) => Ok(Outcome::Committed(written)),
            None => {
                let (holder, pending) = held(client, event).await?;
                Ok(Outcome::Held { holder, pending })
            }
        }
    })
    .await?;
    match outcome {
        Outcome::Committed(written) => Ok((Applied::Now, written)),
        // The ledger held the event, or its body under another id.
        Outcome::Held { holder, pending } => {
            let id = holder.ok_or_else(|| PgError::Refused(ledger::NO_HOLDER.into()))?;
            let applied = ledger::held_as(event, id);
            if applied == Applied::Earlier {
                // What that attempt left is handed off.
                handoff_rows::deliver(env, &pending).await;
            }
            Ok((applied, Vec::new()))
        }
    }
}

/// How a transaction ended.
enum Outcome {
    /// Committed: the hand-off rows it wrote.
    Committed(Vec<Row>),
    /// Rolled back, the ledger holding the event: see [`held`].
    Held {
        holder: Option<String>,
        pending: Vec<Row>,
    },
}

/// The transaction, in one round trip. Returns the hand-off rows written
/// (not one whose key another event's row holds already: an outbox row
/// keyed by a business object), or `None` if the ledger held the event.
async fn commit(
    client: &Client,
    event: &VerifiedEvent,
    (ledger_sql, ledger): (&'static str, &Statement),
    writes: &[&Statement],
    rows: &[Row],
) -> Result<Option<Vec<Row>>, PgError> {
    let ledger_params = sql::params(&ledger.params);
    let ledger_typed = sql::typed(&ledger_params);
    let texts: Vec<String> = writes.iter().map(|s| sql::text(s)).collect();
    let params: Vec<_> = writes.iter().map(|s| sql::params(&s.params)).collect();
    let typed: Vec<_> = writes
        .iter()
        .zip(&params)
        .map(|(write, params)| sql::typed_for(write.sql, params))
        .collect();
    let (listed, now) = (handoff::listed(rows), now_ms());
    let row_params: [(&(dyn ToSql + Sync), Type); 4] = [
        (&listed, Type::TEXT),
        (&event.source, Type::TEXT),
        (&event.id, Type::TEXT),
        (&now, Type::INT8),
    ];

    let mut pipeline = Pipeline::new(client);
    let begun = begin(&mut pipeline);
    let ledger_row = pipeline.execute(ledger_sql, &ledger_typed);
    let written: Vec<_> = texts
        .iter()
        .zip(&typed)
        .map(|(text, params)| pipeline.execute(text, params))
        .collect();
    let inserted = (!rows.is_empty()).then(|| pipeline.query(handoff::INSERT, &row_params));
    let committed = pipeline.commit();
    let mut answers = pipeline.answers().await;

    // The first refusal is the cause; those after it only say the
    // transaction was aborted, and Postgres answered the COMMIT with a
    // rollback.
    begun.check(&mut answers)?;
    match answers.take(ledger_row) {
        Err(e) if e.code().is_some_and(|c| c.code() == UNIQUE_VIOLATION) => return Ok(None),
        inserted => inserted?,
    };
    for (i, (sent, statement)) in written.into_iter().zip(writes).enumerate() {
        if let Err(e) = answers.take(sent) {
            let which = format!("the effect's statement {} of {}", i + 1, writes.len());
            return Err(PgError::from(e).at(&which, statement));
        }
    }
    let inserted = match inserted {
        Some(sent) => answers.take(sent)?,
        None => Vec::new(),
    };
    answers.take(committed)?;
    Ok(Some(handoff::returned(rows, &inserted)))
}

/// The id under which the ledger holds `event` (its own, or another
/// holding the same signed body), and the event's rows not yet handed
/// off: one round trip, in a transaction of its own.
async fn held(
    client: &Client,
    event: &VerifiedEvent,
) -> Result<(Option<String>, Vec<Row>), PgError> {
    let holder = ledger::holder(event);
    let holder_sql = sql::text(&holder);
    let holder_params = sql::params(&holder.params);
    let holder_typed = sql::typed(&holder_params);
    let pending_params: [(&(dyn ToSql + Sync), Type); 2] =
        [(&event.source, Type::TEXT), (&event.id, Type::TEXT)];
    let mut pipeline = Pipeline::new(client);
    let begun = begin(&mut pipeline);
    let found = pipeline.query(&holder_sql, &holder_typed);
    let pending = pipeline.query(handoff::PENDING, &pending_params);
    let committed = pipeline.commit();
    let mut answers = pipeline.answers().await;
    begun.check(&mut answers)?;
    let found: Vec<PgRow> = answers.take(found)?;
    let pending = answers.take(pending)?;
    answers.take(committed)?;
    let holder = match found.first() {
        Some(row) => Some(row.try_get(0)?),
        None => None,
    };
    Ok((holder, handoff::read(pending)))
}
