//! What is left to hand off to D1, for the operators: how many rows wait,
//! since when, and those the relay gave up on after [`STUCK_TRIES`]
//! refusals, which an operator makes due again once D1 takes them.

use serde::Serialize;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;
use worker::Env;

use super::pipeline::Pipeline;
use super::{begin, with_client, PgError};

/// After so many refusals the relay no longer claims a row, and alerts it:
/// about ten minutes of cron runs at least, past a passing refusal, and a
/// cap on the D1 calls a row that never goes costs every run.
pub(crate) const STUCK_TRIES: i32 = 10;

/// How much is left to hand off, and the stuck rows, oldest first.
#[derive(Debug, Serialize)]
pub(crate) struct Backlog {
    /// Rows not yet handed off, stuck ones included.
    pub waiting: i64,
    /// When the oldest of them was written (ms).
    pub oldest_created_at: Option<i64>,
    pub stuck: i64,
    pub stuck_after_tries: i32,
    /// The oldest stuck rows, at most the limit asked for.
    pub stuck_rows: Vec<StuckRow>,
}

/// A row the relay gave up on.
#[derive(Debug, Serialize)]
pub(crate) struct StuckRow {
    pub kind: String,
    pub key: String,
    pub source: String,
    pub event_id: String,
    pub tries: i32,
    pub created_at: i64,
}

/// Served by the index on `(created_at) WHERE handed_off_at IS NULL`.
const COUNTS: &str = "SELECT count(*), min(created_at), count(*) FILTER (WHERE tries >= $1) \
     FROM webhook_outbox WHERE handed_off_at IS NULL";

const LIST: &str = "SELECT kind, key, source, event_id, tries, created_at FROM webhook_outbox \
     WHERE handed_off_at IS NULL AND tries >= $1 ORDER BY created_at LIMIT $2";

/// Every stuck row due again, from its first try: the relay claims it at
/// its next run.
const RETRY: &str = "WITH retried AS (UPDATE webhook_outbox SET tries = 0 \
     WHERE handed_off_at IS NULL AND tries >= $1 RETURNING 1) SELECT count(*) FROM retried";

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// The backlog, with at most `limit` stuck rows listed.
pub(crate) async fn backlog(env: &Env, limit: i64) -> Result<Backlog, PgError> {
    with_client(env, async |client: &Client| {
        let counts: [(&(dyn ToSql + Sync), Type); 1] = [(&STUCK_TRIES, Type::INT4)];
        let list: [(&(dyn ToSql + Sync), Type); 2] =
            [(&STUCK_TRIES, Type::INT4), (&limit, Type::INT8)];
        let mut pipeline = Pipeline::new(client);
        let begun = begin(&mut pipeline);
        let counted = pipeline.query(COUNTS, &counts);
        let listed = pipeline.query(LIST, &list);
        let committed = pipeline.commit();
        let mut answers = pipeline.answers().await;
        begun.check(&mut answers)?;
        let counted = answers.take(counted)?;
        let listed = answers.take(listed)?;
        answers.take(committed)?;
        let totals = counted.first().ok_or_else(|| unread("no count"))?;
        let stuck_rows = listed
            .iter()
            .map(|row| {
                Ok(StuckRow {
                    kind: row.try_get(0)?,
                    key: row.try_get(1)?,
                    source: row.try_get(2)?,
                    event_id: row.try_get(3)?,
                    tries: row.try_get(4)?,
                    created_at: row.try_get(5)?,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()?;
        Ok(Backlog {
            waiting: totals.try_get(0)?,
            oldest_created_at: totals.try_get(1)?,
            stuck: totals.try_get(2)?,
            stuck_after_tries: STUCK_TRIES,
            stuck_rows,
        })
    })
    .await
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// Makes every stuck row due again; returns how many.
pub(crate) async fn retry(env: &Env) -> Result<i64, PgError> {
    with_client(env, async |client: &Client| {
        let params: [(&(dyn ToSql + Sync), Type); 1] = [(&STUCK_TRIES, Type::INT4)];
        let mut pipeline = Pipeline::new(client);
        let begun = begin(&mut pipeline);
        let retried = pipeline.query(RETRY, &params);
        let committed = pipeline.commit();
        let mut answers = pipeline.answers().await;
        begun.check(&mut answers)?;
        let retried = answers.take(retried)?;
        answers.take(committed)?;
        let count = retried.first().ok_or_else(|| unread("no count"))?;
        Ok(count.try_get(0)?)
    })
    .await
}

fn unread(why: &str) -> PgError {
    PgError::Refused(why.to_string())
}
