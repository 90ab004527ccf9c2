//! What the admin API and the dashboard read and change: typed rows out of
//! D1 (each list built by SQLite as one JSON value, see `d1`) and out of
//! the inboxes.
// The rows' fields are read by the dashboard; the API passes their JSON on
// as SQLite built it. A build with the API alone decodes none.
#![cfg_attr(not(feature = "dashboard"), allow(dead_code))]

use serde::{Deserialize, Serialize};
use worker::{Env, Result};

use crate::clock::now_ms;
use crate::d1::{Db, Json, Statement};
use crate::forward::report::DeliveryReport;
use crate::inbox::client::{self, InboxState};
use crate::names::named_enum;
use crate::outbox::{self, OutboxStatus};

named_enum! {
    /// Which list of events.
    pub enum Listing {
        /// In the ledger, applied (dismissed events excepted).
        Processed = "processed",
        /// Gave up, and not dismissed.
        Failed = "failed",
    }
}

/// An event in a list, newest first.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedEvent {
    pub source: String,
    pub event_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: Listing,
    #[serde(default)]
    pub processed_at: Option<i64>,
    #[serde(default)]
    pub failed_at: Option<i64>,
    #[serde(default)]
    pub last_error: Option<String>,
}

/// An outbox row. `source` and `event_id` are left out where the row is
/// listed under its event.
#[derive(Debug, Clone, Deserialize)]
pub struct OutboxRow {
    pub idempotency_key: String,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub event_id: Option<String>,
    pub action: String,
    pub status: OutboxStatus,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub note: Option<String>,
    pub updated_at: i64,
}

/// One event: its inbox's state and its records in D1, as they were read
/// (the API forwards them; the dashboard decodes them).
#[derive(Serialize)]
pub struct EventDetail<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    /// `None` when the inbox holds nothing (never received, or forgotten).
    pub inbox: Option<Json<InboxState>>,
    pub records: Json<Records>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Records {
    pub ledger: Option<LedgerRow>,
    pub failure: Option<FailureRow>,
    pub outbox: Vec<OutboxRow>,
    /// Its deliveries to destinations (see `forward`).
    pub forwards: Vec<DeliveryReport>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LedgerRow {
    #[serde(rename = "type")]
    pub kind: String,
    pub received_at: i64,
    pub processed_at: i64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FailureRow {
    pub dismissed_at: Option<i64>,
}

/// Per source: the delivery counters (telemetry, see `stats`) and exact
/// counts from the ledger, `failed_events` and `outbox`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Stats {
    pub counters: Vec<Counter>,
    pub processed: Vec<SourceCount>,
    pub failed: Vec<SourceCount>,
    pub outbox: Vec<OutboxCount>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Counter {
    pub source: String,
    pub counter: String,
    pub value: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SourceCount {
    pub source: String,
    pub events: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OutboxCount {
    pub source: String,
    pub status: OutboxStatus,
    pub rows: u64,
}

/// A filter on the event lists; `None` matches all.
#[derive(Default)]
pub struct EventFilter<'a> {
    pub source: Option<&'a str>,
    pub kind: Option<&'a str>,
    /// An event id in any source, or a key (`"{source}:{id}"`).
    pub id_or_key: Option<&'a str>,
    /// Listed at or after this time (ms), and before `until`.
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// Keyset pagination: only events listed after this one (its time,
    /// source and id), newest first. Not `OFFSET`: a page further back
    /// costs no more than the first, and rows arriving meanwhile do not
    /// shift it.
    pub after: Option<(i64, &'a str, &'a str)>,
}

/// Recent events of one listing, newest first.
pub async fn events(
    env: &Env,
    listing: Listing,
    filter: &EventFilter<'_>,
    limit: u32,
) -> Result<Json<Vec<ListedEvent>>> {
    let sql = match listing {
        Listing::Processed => {
            "SELECT json_group_array(json_object('source', source, 'event_id', event_id, 'type', type, \
                 'status', 'processed', 'received_at', received_at, 'processed_at', processed_at)) AS json \
             FROM (SELECT * FROM processed_events p \
                   WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR type = ?2) \
                     AND (?4 IS NULL OR event_id = ?4 OR source || ':' || event_id = ?4) \
                     AND (?5 IS NULL OR processed_at >= ?5) AND (?6 IS NULL OR processed_at < ?6) \
                     AND (?7 IS NULL OR (processed_at, source, event_id) < (?7, ?8, ?9)) \
                     AND NOT EXISTS (SELECT 1 FROM failed_events f WHERE f.source = p.source \
                       AND f.event_id = p.event_id AND f.dismissed_at IS NOT NULL) \
                   ORDER BY processed_at DESC, source DESC, event_id DESC LIMIT ?3)"
        }
        Listing::Failed => {
            "SELECT json_group_array(json_object('source', source, 'event_id', event_id, 'type', type, \
                 'status', 'failed', 'received_at', received_at, 'failed_at', failed_at, \
                 'last_error', last_error)) AS json \
             FROM (SELECT * FROM failed_events \
                   WHERE dismissed_at IS NULL AND (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR type = ?2) \
                     AND (?4 IS NULL OR event_id = ?4 OR source || ':' || event_id = ?4) \
                     AND (?5 IS NULL OR failed_at >= ?5) AND (?6 IS NULL OR failed_at < ?6) \
                     AND (?7 IS NULL OR (failed_at, source, event_id) < (?7, ?8, ?9)) \
                   ORDER BY failed_at DESC, source DESC, event_id DESC LIMIT ?3)"
        }
    };
    let (after_at, after_source, after_id) = match filter.after {
        Some((at, source, id)) => (Some(at), Some(source), Some(id)),
        None => (None, None, None),
    };
    let params = vec![
        filter.source.into(),
        filter.kind.into(),
        i64::from(limit).into(),
        filter.id_or_key.into(),
        filter.since.into(),
        filter.until.into(),
        after_at.into(),
        after_source.into(),
        after_id.into(),
    ];
    one(env, Statement::new(sql, params)).await
}

/// One event: its inbox's state and its records in D1 (ledger row,
/// failure, outbox rows, deliveries; an operators' alert that names it is not one of
/// its side effects).
pub async fn event<'a>(env: &Env, source: &'a str, id: &'a str) -> Result<EventDetail<'a>> {
    let records = Statement::new(
        "SELECT json_object(\
             'ledger', (SELECT json_object('type', type, 'received_at', received_at, \
                 'processed_at', processed_at) FROM processed_events \
                 WHERE source = ?1 AND event_id = ?2), \
             'failure', (SELECT json_object('failed_at', failed_at, 'last_error', last_error, \
                 'dismissed_at', dismissed_at) FROM failed_events WHERE source = ?1 AND event_id = ?2), \
             'outbox', (SELECT json_group_array(json_object('idempotency_key', idempotency_key, \
                 'action', action, 'status', status, 'attempts', attempts, \
                 'last_error', last_error, 'note', note, 'updated_at', updated_at)) \
                 FROM (SELECT * FROM outbox WHERE source = ?1 AND event_id = ?2 \
                   AND action != 'notify_operator' ORDER BY created_at, idempotency_key)), \
             'forwards', (SELECT json_group_array(json_object('delivery_id', delivery_id, \
                 'destination', destination, 'status', status, 'attempts', attempts, \
                 'last_status', last_status, 'last_error', last_error, 'latency_ms', latency_ms, \
                 'next_attempt_at', next_attempt_at, 'delivered_at', delivered_at)) \
                 FROM (SELECT * FROM forwards WHERE source = ?1 AND event_id = ?2 \
                   ORDER BY destination))) AS json",
        vec![source.into(), id.into()],
    );
    let records = one(env, records).await?;
    Ok(EventDetail {
        source,
        event_id: id,
        inbox: client::state(env, source, id).await?,
        records,
    })
}

/// Outbox rows of one status, most recently updated first.
pub async fn outbox_rows(
    env: &Env,
    status: OutboxStatus,
    limit: u32,
) -> Result<Json<Vec<OutboxRow>>> {
    let statement = Statement::new(
        "SELECT json_group_array(json_object('idempotency_key', idempotency_key, 'source', source, \
             'event_id', event_id, 'action', action, 'status', status, 'attempts', attempts, \
             'last_error', last_error, 'note', note, 'updated_at', updated_at)) AS json \
         FROM (SELECT * FROM outbox WHERE status = ?1 ORDER BY updated_at DESC LIMIT ?2)",
        vec![status.name().into(), i64::from(limit).into()],
    );
    one(env, statement).await
}

/// An alert to the operators, as its outbox row holds it.
#[derive(Debug, Clone, Deserialize)]
pub struct AlertRow {
    pub source: String,
    pub text: Option<String>,
    pub status: OutboxStatus,
    pub note: Option<String>,
    pub created_at: i64,
}

/// The latest alerts, newest first.
pub async fn alerts(env: &Env, limit: u32) -> Result<Json<Vec<AlertRow>>> {
    let statement = Statement::new(
        "SELECT json_group_array(json_object('source', source, \
             'text', json_extract(payload, '$.text'), 'status', status, 'note', note, \
             'created_at', created_at)) AS json \
         FROM (SELECT * FROM outbox WHERE action = 'notify_operator' \
               ORDER BY created_at DESC LIMIT ?1)",
        vec![i64::from(limit).into()],
    );
    one(env, statement).await
}

/// Per-source counters and exact counts (side effects without the
/// operators' alerts, which [`alerts`] lists).
pub async fn stats(env: &Env) -> Result<Json<Stats>> {
    let statement = Statement::new(
        "SELECT json_object(\
             'counters', (SELECT json_group_array(json_object('source', source, 'counter', counter, \
                 'value', value)) FROM source_counters), \
             'processed', (SELECT json_group_array(json_object('source', source, 'events', n)) \
                 FROM (SELECT source, count(*) AS n FROM processed_events p \
                 WHERE NOT EXISTS (SELECT 1 FROM failed_events f WHERE f.source = p.source \
                   AND f.event_id = p.event_id AND f.dismissed_at IS NOT NULL) GROUP BY source)), \
             'failed', (SELECT json_group_array(json_object('source', source, 'events', n)) \
                 FROM (SELECT source, count(*) AS n FROM failed_events WHERE dismissed_at IS NULL \
                 GROUP BY source)), \
             'outbox', (SELECT json_group_array(json_object('source', source, 'status', status, \
                 'rows', n)) FROM (SELECT source, status, count(*) AS n FROM outbox \
                 WHERE action != 'notify_operator' GROUP BY source, status))) AS json",
        Vec::new(),
    );
    one(env, statement).await
}

/// The trend's rows as `(minute or hour since the epoch, source, series,
/// count)`: per minute over the last hour, per hour over the last day
/// (summed by SQLite), both up to `now_minute`.
#[derive(Debug, Deserialize)]
pub struct TrendRows {
    pub minutes: Vec<(i64, String, String, i64)>,
    pub hours: Vec<(i64, String, String, i64)>,
}

pub async fn trend(env: &Env, now_minute: i64) -> Result<Json<TrendRows>> {
    let first_minute = now_minute - 59;
    let first_hour_minute = (now_minute.div_euclid(60) - 23) * 60;
    let statement = Statement::new(
        "SELECT json_object(\
             'minutes', (SELECT json_group_array(json_array(minute, source, outcome, value)) \
                 FROM delivery_trend WHERE minute BETWEEN ?1 AND ?3), \
             'hours', (SELECT json_group_array(json_array(hour, source, outcome, n)) \
                 FROM (SELECT minute / 60 AS hour, source, outcome, sum(value) AS n \
                 FROM delivery_trend WHERE minute BETWEEN ?2 AND ?3 \
                 GROUP BY hour, source, outcome))) AS json",
        vec![
            first_minute.into(),
            first_hour_minute.into(),
            now_minute.into(),
        ],
    );
    one(env, statement).await
}

/// A dead row made due again and sent: the consumer performs it once, under
/// its same idempotency key. `false` when there is no dead row by that key.
pub async fn requeue(env: &Env, key: &str) -> Result<bool> {
    let statement = Statement::new(
        "UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = ?2, updated_at = ?2, \
             dead_lettered_at = NULL \
         WHERE idempotency_key = ?1 AND status = 'dead'",
        vec![key.into(), now_ms().into()],
    );
    if Db::from_env(env)?.run(&statement).await? == 0 {
        return Ok(false);
    }
    outbox::enqueue(env, &[key.to_string()], None).await?;
    Ok(true)
}

/// What a statement that always returns one `json` row returns.
async fn one<T>(env: &Env, statement: Statement) -> Result<Json<T>> {
    Db::from_env(env)?
        .json(&statement)
        .await?
        .ok_or_else(|| "the query returned no row".into())
}
