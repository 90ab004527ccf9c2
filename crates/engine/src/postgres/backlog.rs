//! What is left to hand off to D1, for the operators: how many rows wait,
//! since when, and those the relay gave up on after [`STUCK_TRIES`]
//! failures, which an operator makes due again once D1 takes them.

use serde::Serialize;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;
use worker::Env;

use super::pipeline::Pipeline;
use super::tries::STUCK_TRIES;
use super::{begin, with_client, PgError};

/// Rows waiting are counted up to this many: a count of them all would
/// read the whole backlog at each look.
const COUNTED_MAX: i64 = 100_000;

/// How much is left to hand off, and the stuck rows, oldest first.
#[derive(Debug, Serialize)]
pub(crate) struct Backlog {
    /// Rows not yet handed off, stuck ones included, up to [`COUNTED_MAX`].
    pub waiting: i64,
    /// Whether more wait than that.
    pub waiting_more: bool,
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

/// Each served by an index of rows not yet handed off: the count up to
/// `$2`, the oldest, and the stuck (`webhook_outbox_due`).
const COUNTS: &str = "SELECT \
     (SELECT count(*) FROM (SELECT 1 FROM webhook_outbox WHERE handed_off_at IS NULL LIMIT $2) w), \
     (SELECT min(created_at) FROM webhook_outbox WHERE handed_off_at IS NULL), \
     (SELECT count(*) FROM webhook_outbox WHERE handed_off_at IS NULL AND tries >= $1)";

const LIST: &str = "SELECT kind, key, source, event_id, tries, created_at FROM webhook_outbox \
     WHERE handed_off_at IS NULL AND tries >= $1 ORDER BY created_at LIMIT $2";

/// Every stuck row due again, from its first try: the relay claims it at
/// its next run.
const RETRY: &str = "WITH retried AS (UPDATE webhook_outbox SET tries = 0 \
     WHERE handed_off_at IS NULL AND tries >= $1 RETURNING 1) SELECT count(*) FROM retried";

/// The backlog, with at most `limit` stuck rows listed.
pub(crate) async fn backlog(env: &Env, limit: i64) -> Result<Backlog, PgError> {
    with_client(env, async |client: &Client| {
        let more = COUNTED_MAX + 1;
        let counts: [(&(dyn ToSql + Sync), Type); 2] =
            [(&STUCK_TRIES, Type::INT4), (&more, Type::INT8)];
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
        let waiting: i64 = totals.try_get(0)?;
        Ok(Backlog {
            waiting: waiting.min(COUNTED_MAX),
            waiting_more: waiting > COUNTED_MAX,
            oldest_created_at: totals.try_get(1)?,
            stuck: totals.try_get(2)?,
            stuck_after_tries: STUCK_TRIES,
            stuck_rows,
        })
    })
    .await
}

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
