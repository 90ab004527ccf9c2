//! What operators see of forwarding: each destination's state, backlog,
//! dead count, success rate, latency and last error; an event's deliveries
//! (read with its other records, `admin::queries::event`).

use serde::{Deserialize, Serialize};
use worker::Env;

use crate::clock::now_ms;
use crate::d1::{Db, Statement};
use crate::settings::Settings;

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

/// Per destination declared (`?2`) or with state: each figure read from
/// the `(destination, status, created_at)` index, never the whole table.
/// `?1` the window's start.
const REPORT: &str = "SELECT json_group_array(json_object('name', name, 'state', state, \
         'paused', json(CASE WHEN paused = 1 THEN 'true' ELSE 'false' END), \
         'backlog', backlog, 'dead', dead, \
         'success_rate', CASE WHEN tried > 0 THEN 1.0 * succeeded / tried END, \
         'p50_ms', (SELECT latency_ms FROM (SELECT latency_ms, \
                 row_number() OVER (ORDER BY latency_ms) AS rank, count(*) OVER () AS n \
             FROM forwards WHERE destination = name AND status = 'delivered' \
                 AND created_at >= ?1) WHERE rank >= 0.5 * n ORDER BY rank LIMIT 1), \
         'p99_ms', (SELECT latency_ms FROM (SELECT latency_ms, \
                 row_number() OVER (ORDER BY latency_ms) AS rank, count(*) OVER () AS n \
             FROM forwards WHERE destination = name AND status = 'delivered' \
                 AND created_at >= ?1) WHERE rank >= 0.99 * n ORDER BY rank LIMIT 1), \
         'last_error', last_error, 'last_error_at', last_error_at, \
         'declared', json(CASE WHEN declared THEN 'true' ELSE 'false' END))) AS json \
     FROM (SELECT n.name AS name, coalesce(d.state, 'closed') AS state, d.paused AS paused, \
             d.last_error AS last_error, d.last_error_at AS last_error_at, \
             n.name IN (SELECT value FROM json_each(?2)) AS declared, \
             (SELECT count(*) FROM forwards \
                 WHERE destination = n.name AND status IN ('pending', 'sending')) AS backlog, \
             (SELECT count(*) FROM forwards \
                 WHERE destination = n.name AND status = 'dead') AS dead, \
             (SELECT coalesce(sum(attempts), 0) FROM forwards WHERE destination = n.name \
                 AND status IN ('pending', 'sending', 'delivered', 'dead') \
                 AND created_at >= ?1) AS tried, \
             (SELECT count(*) FROM forwards WHERE destination = n.name \
                 AND status = 'delivered' AND created_at >= ?1) AS succeeded \
         FROM (SELECT value AS name FROM json_each(?2) UNION SELECT name FROM destinations) n \
         LEFT JOIN destinations d ON d.name = n.name ORDER BY n.name)";

/// Every destination declared, or with state (paused, or ever failed), by
/// name.
pub async fn destinations(
    env: &Env,
    settings: &Settings,
) -> worker::Result<Vec<DestinationReport>> {
    // A misconfiguration shows as no declared destination, not an error:
    // the console must still show what exists.
    let declared = settings.destinations().unwrap_or_default();
    let names: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
    let since = now_ms() - WINDOW_MS;
    let statement = Statement::new(
        REPORT,
        vec![since.into(), serde_json::to_string(&names)?.into()],
    );
    Ok(Db::from_env(env)?
        .row(&statement)
        .await?
        .unwrap_or_default())
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
