//! What operators see of forwarding: each destination's state, backlog,
//! dead count, success rate, latency and last error; an event's deliveries
//! (read with its other records, `admin::queries::event`).

use serde::{Deserialize, Serialize};
use worker::Env;

use super::destinations::{self, Bounds};
use crate::clock::now_ms;
use crate::d1::{Db, Statement};

/// The window the success rate and latencies are measured over.
pub const WINDOW_MS: i64 = 60 * 60 * 1000;

/// One destination, as the console shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct DestinationReport {
    pub name: String,
    /// `closed`, `open` or `disabled`.
    pub state: String,
    pub paused: bool,
    /// Deliveries not yet delivered nor dead: due, retrying, held or in
    /// flight.
    pub backlog: i64,
    pub dead: i64,
    /// Of the attempts at deliveries created in the last hour, the share
    /// that succeeded; `None` when there were none.
    pub success_rate: Option<f64>,
    /// Of the deliveries made in the last hour, the successful attempt's.
    pub p50_ms: Option<i64>,
    pub p99_ms: Option<i64>,
    pub last_error: Option<String>,
    pub last_error_at: Option<i64>,
    /// Whether `DESTINATIONS` still declares it.
    pub declared: bool,
}

/// Per destination with rows or state: counts, rate and percentiles in one
/// scan of its index. `?1` the window's start.
const REPORT: &str = "WITH counts AS (\
         SELECT destination AS name, sum(status IN ('pending', 'sending')) AS backlog, \
             sum(status = 'dead') AS dead, \
             sum(CASE WHEN created_at >= ?1 THEN attempts END) AS tried, \
             sum(created_at >= ?1 AND status = 'delivered') AS succeeded \
         FROM forwards GROUP BY destination), \
     ranked AS (\
         SELECT destination AS name, latency_ms, \
             row_number() OVER (PARTITION BY destination ORDER BY latency_ms) AS rank, \
             count(*) OVER (PARTITION BY destination) AS n \
         FROM forwards WHERE status = 'delivered' AND created_at >= ?1), \
     latency AS (\
         SELECT name, min(CASE WHEN rank >= 0.5 * n THEN latency_ms END) AS p50, \
             min(CASE WHEN rank >= 0.99 * n THEN latency_ms END) AS p99 \
         FROM ranked GROUP BY name), \
     names AS (SELECT name FROM counts UNION SELECT name FROM destinations ORDER BY name) \
     SELECT json_group_array(json_object('name', n.name, \
         'state', coalesce(d.state, 'closed'), \
         'paused', json(CASE WHEN d.paused = 1 THEN 'true' ELSE 'false' END), \
         'backlog', coalesce(c.backlog, 0), 'dead', coalesce(c.dead, 0), \
         'success_rate', CASE WHEN c.tried > 0 THEN 1.0 * c.succeeded / c.tried END, \
         'p50_ms', l.p50, 'p99_ms', l.p99, \
         'last_error', d.last_error, 'last_error_at', d.last_error_at, \
         'declared', json('false'))) AS json \
     FROM names n LEFT JOIN counts c ON c.name = n.name \
         LEFT JOIN destinations d ON d.name = n.name LEFT JOIN latency l ON l.name = n.name";

/// Every destination with deliveries or state, by name, then those only
/// declared so far.
pub async fn destinations(env: &Env) -> worker::Result<Vec<DestinationReport>> {
    let since = now_ms() - WINDOW_MS;
    let rows: Vec<DestinationReport> = Db::from_env(env)?
        .row(&Statement::new(REPORT, vec![since.into()]))
        .await?
        .unwrap_or_default();
    let mut rows = rows;
    // A misconfiguration shows as no declared destination, not an error:
    // the console must still show what exists.
    let declared = Bounds::from_env(env)
        .and_then(|bounds| destinations::all(env, &bounds))
        .unwrap_or_default();
    for destination in declared {
        match rows.iter_mut().find(|row| row.name == destination.name) {
            Some(row) => row.declared = true,
            None => rows.push(DestinationReport {
                name: destination.name,
                state: "closed".into(),
                paused: false,
                backlog: 0,
                dead: 0,
                success_rate: None,
                p50_ms: None,
                p99_ms: None,
                last_error: None,
                last_error_at: None,
                declared: true,
            }),
        }
    }
    Ok(rows)
}

/// One delivery of an event, as the console shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub delivery_id: String,
    pub destination: String,
    pub status: String,
    pub attempts: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub latency_ms: Option<i64>,
    pub next_attempt_at: i64,
    pub delivered_at: Option<i64>,
}
