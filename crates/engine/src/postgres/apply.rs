//! One event in one Postgres transaction, as the recipe goes: the ledger
//! row first (`ON CONFLICT DO NOTHING RETURNING`), then, only if it came
//! back, the effect's writes and the hand-off rows, then `COMMIT`. Two
//! round trips: `BEGIN` with the ledger row, then the rest with `COMMIT`
//! (pipelined: should one statement fail, Postgres turns the `COMMIT` into
//! a rollback, and nothing is left behind). What cannot be sent at all is
//! refused before anything is.

use std::cell::Cell;

use futures_util::future::{join, join3, join4, join_all};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row as PgRow};
use worker::Env;

use super::handoff::{self, Row};
use super::{begin, sql, with_client, PgError};
use crate::clock::now_ms;
use crate::d1::Statement;
use crate::event::VerifiedEvent;
use crate::ledger::{self, Applied};
use crate::log::{self, Line};

/// The ledger row, in D1's column order (see `ledger::row`).
pub(crate) const LEDGER_INSERT: &str = "INSERT INTO processed_events \
     (source, event_id, type, received_at, processed_at, fence_sha256) \
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING event_id";

/// An operator's dismissal: the ledger row, marked, so that no later copy
/// applies the event, and so that it is told from an applied one.
const LEDGER_DISMISS: &str = "INSERT INTO processed_events \
     (source, event_id, type, received_at, processed_at, fence_sha256, dismissed_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $5) ON CONFLICT DO NOTHING RETURNING event_id";

const DISMISSED: &str = "SELECT event_id FROM processed_events \
     WHERE source = $1 AND event_id = $2 AND dismissed_at IS NOT NULL";

/// After a clash: the event's own row first (an earlier attempt), else the
/// row holding the same signed body (a replay).
const HOLDER: &str = "SELECT event_id FROM processed_events \
     WHERE source = $1 AND (event_id = $2 OR fence_sha256 = $3) \
     ORDER BY event_id = $2 DESC LIMIT 1";

/// Applies `batch` (as `effects::plan` made it: the ledger row, the
/// effect's writes, the outbox rows and deliveries) for `event`, then hands
/// its rows off to D1.
pub(crate) async fn apply(
    env: &Env,
    event: &VerifiedEvent,
    batch: &[Statement],
) -> Result<Applied, PgError> {
    transact(env, event, LEDGER_INSERT, batch).await
}

/// Records an operator's dismissal of `event` in the ledger (and hands
/// its ledger row off to D1): `Now`, or what the ledger held already.
pub(crate) async fn dismiss(env: &Env, event: &VerifiedEvent) -> Result<Applied, PgError> {
    transact(env, event, LEDGER_DISMISS, &[ledger::row(event, now_ms())]).await
}

/// Whether the ledger holds `event` as dismissed. Read in a transaction,
/// as every read here: Hyperdrive's query cache must not answer it.
pub(crate) async fn dismissed(env: &Env, event: &VerifiedEvent) -> Result<bool, PgError> {
    with_client(env, async |client: &Client| {
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&event.source, Type::TEXT), (&event.id, Type::TEXT)];
        let (begun, rows, committed) = join3(
            begin(client),
            client.query_typed(DISMISSED, &params),
            client.batch_execute("COMMIT"),
        )
        .await;
        begun?;
        committed?;
        Ok(!rows?.is_empty())
    })
    .await
}

/// Whether the ledger holds `event` (or its signed body under another
/// id); what an earlier attempt left to hand off is handed off.
pub(crate) async fn handled(env: &Env, event: &VerifiedEvent) -> Result<bool, PgError> {
    with_client(env, async |client: &Client| {
        let (begun, holder, pending, committed) = join4(
            begin(client),
            holder(client, event),
            pending(client, event),
            client.batch_execute("COMMIT"),
        )
        .await;
        begun?;
        committed?;
        let holder = holder?;
        if holder.as_deref() == Some(event.id.as_str()) {
            hand_off(env, client, event, &handoff::read(pending?)).await;
        }
        Ok(holder.is_some())
    })
    .await
}

/// `batch` in one transaction, its ledger row written by `ledger_sql`.
/// Once `COMMIT` is acknowledged the effect is applied, whatever befalls
/// the hand-off after it (it is done again by the next attempt, or the
/// relay).
async fn transact(
    env: &Env,
    event: &VerifiedEvent,
    ledger_sql: &'static str,
    batch: &[Statement],
) -> Result<Applied, PgError> {
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
    let committed = Cell::new(false);
    let done = with_client(env, async |client: &Client| {
        let ledger_params = sql::params(&ledger.params);
        let (begun, inserted) = join(
            begin(client),
            client.query_typed(ledger_sql, &sql::typed(&ledger_params)),
        )
        .await;
        begun?;
        if inserted?.is_empty() {
            return clashed(env, client, event).await;
        }
        let written = commit(client, event, &writes, &rows).await?;
        committed.set(true);
        hand_off(env, client, event, &written).await;
        Ok(Applied::Now)
    })
    .await;
    match done {
        Err(e) if committed.get() => {
            log::error(
                &Line::new("handoff_failed")
                    .key(&event.key())
                    .error(e.message()),
            );
            Ok(Applied::Now)
        }
        done => done,
    }
}

/// The writes and the hand-off rows, then `COMMIT`, in one round trip.
/// Returns the hand-off rows written: not one whose key another event's
/// row holds already (an outbox row keyed by a business object).
async fn commit(
    client: &Client,
    event: &VerifiedEvent,
    writes: &[&Statement],
    rows: &[Row],
) -> Result<Vec<Row>, PgError> {
    let texts: Vec<String> = writes.iter().map(|s| sql::text(s)).collect();
    let params: Vec<_> = writes.iter().map(|s| sql::params(&s.params)).collect();
    let typed: Vec<_> = writes
        .iter()
        .zip(&params)
        .map(|(write, params)| sql::typed_for(write.sql, params))
        .collect();
    let now = now_ms();
    let encoded: Vec<String> = rows
        .iter()
        .map(|row| handoff::encode(&row.params))
        .collect();
    let kinds: Vec<&str> = rows.iter().map(|row| row.kind.name()).collect();
    let row_params: Vec<[(&(dyn ToSql + Sync), Type); 6]> = rows
        .iter()
        .zip(&encoded)
        .zip(&kinds)
        .map(
            |((row, params), kind)| -> [(&(dyn ToSql + Sync), Type); 6] {
                [
                    (kind, Type::TEXT),
                    (&row.key, Type::TEXT),
                    (&event.source, Type::TEXT),
                    (&event.id, Type::TEXT),
                    (params, Type::TEXT),
                    (&now, Type::INT8),
                ]
            },
        )
        .collect();
    let written = texts
        .iter()
        .zip(&typed)
        .map(|(text, params)| client.execute_typed(text, params));
    let inserted = row_params
        .iter()
        .map(|params| client.query_typed(handoff::INSERT, params));
    let (written, inserted, committed) = join3(
        join_all(written),
        join_all(inserted),
        client.batch_execute("COMMIT"),
    )
    .await;
    // The first refusal is the cause; those after it only say the
    // transaction was aborted. Postgres answered the COMMIT with a rollback.
    let mut written = written.into_iter().zip(writes).enumerate();
    if let Some((i, (Err(e), statement))) = written.find(|(_, (result, _))| result.is_err()) {
        let which = format!("the effect's statement {} of {}", i + 1, writes.len());
        return Err(PgError::from(e).at(&which, statement));
    }
    let inserted = inserted.into_iter().collect::<Result<Vec<_>, _>>()?;
    committed?;
    Ok(rows
        .iter()
        .zip(inserted)
        .filter(|(_, returned)| !returned.is_empty())
        .map(|(row, _)| row.clone())
        .collect())
}

/// The ledger held the event, or its body under another id: says which
/// (read before the rollback, within the transaction), and rolls back;
/// after an earlier attempt, hands off what it left.
async fn clashed(env: &Env, client: &Client, event: &VerifiedEvent) -> Result<Applied, PgError> {
    let (holder, pending, rolled_back) = join3(
        holder(client, event),
        pending(client, event),
        client.batch_execute("ROLLBACK"),
    )
    .await;
    rolled_back?;
    let Some(id) = holder? else {
        return Err(PgError::Refused(ledger::NO_HOLDER.into()));
    };
    let applied = ledger::held_as(event, id);
    if applied == Applied::Earlier {
        hand_off(env, client, event, &handoff::read(pending?)).await;
    }
    Ok(applied)
}

/// The hand-off after a commit: its failure is logged, never the event's.
async fn hand_off(env: &Env, client: &Client, event: &VerifiedEvent, rows: &[Row]) {
    if let Err(e) = handoff::deliver(env, client, rows).await {
        log::error(
            &Line::new("handoff_failed")
                .key(&event.key())
                .error(e.message()),
        );
    }
}

/// The id under which the ledger holds `event`: its own, or another
/// holding the same signed body.
async fn holder(client: &Client, event: &VerifiedEvent) -> Result<Option<String>, PgError> {
    let params: [(&(dyn ToSql + Sync), Type); 3] = [
        (&event.source, Type::TEXT),
        (&event.id, Type::TEXT),
        (&event.fence, Type::TEXT),
    ];
    let rows = client.query_typed(HOLDER, &params).await?;
    Ok(match rows.first() {
        Some(row) => Some(row.try_get(0)?),
        None => None,
    })
}

/// The event's rows not yet handed off.
async fn pending(client: &Client, event: &VerifiedEvent) -> Result<Vec<PgRow>, PgError> {
    let params: [(&(dyn ToSql + Sync), Type); 2] =
        [(&event.source, Type::TEXT), (&event.id, Type::TEXT)];
    Ok(client.query_typed(handoff::PENDING, &params).await?)
}
