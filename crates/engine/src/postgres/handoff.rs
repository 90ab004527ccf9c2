//! What the engine's D1 tables need of an event committed in Postgres: its
//! ledger row (for the failed list, the alerts, the admin pages), its
//! outbox rows and its deliveries. They are written in the event's
//! transaction to `webhook_outbox`, then copied to D1 after the commit, and
//! marked handed off. Copies are idempotent (`ON CONFLICT DO NOTHING` on
//! both sides), so a hand-off cut short is simply done again: by the
//! event's next attempt, or by the cron relay, which claims what is left
//! with `FOR UPDATE SKIP LOCKED` so that two runs never hold one row.

use futures_util::future::{join, join3, join_all};
use serde_json::Value as Json;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;
use worker::Env;

use super::{begin, with_client, PgError};
use crate::clock::now_ms;
use crate::config::Store;
use crate::d1::{Db, Statement, Value};
use crate::event::{dedupe_key, VerifiedEvent};
use crate::log::{self, Line};
use crate::settings::Settings;
use crate::{forward, ledger, outbox};

/// Which D1 table a row goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Ledger,
    Outbox,
    Forwards,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ledger => "ledger",
            Kind::Outbox => "outbox",
            Kind::Forwards => "forwards",
        }
    }

    fn named(name: &str) -> Option<Kind> {
        [Kind::Ledger, Kind::Outbox, Kind::Forwards]
            .into_iter()
            .find(|kind| kind.name() == name)
    }

    /// The D1 statement writing such a row, a no-op when it is there.
    fn d1_sql(self) -> &'static str {
        match self {
            Kind::Ledger => ledger::MIRROR,
            Kind::Outbox => outbox::INSERT_ROW,
            Kind::Forwards => forward::INSERT_ROWS,
        }
    }

    /// Which of an effect batch's statements it is; `None` for the
    /// effect's own writes.
    pub(crate) fn of(statement: &Statement) -> Option<Kind> {
        match statement.sql {
            sql if sql == ledger::LEDGER_INSERT => Some(Kind::Ledger),
            sql if sql == outbox::INSERT_ROW => Some(Kind::Outbox),
            sql if sql == forward::INSERT_ROWS => Some(Kind::Forwards),
            _ => None,
        }
    }
}

/// A D1 row to write once the event has committed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub kind: Kind,
    /// Unique per kind: the outbox row's idempotency key, else the event's
    /// key.
    pub key: String,
    pub params: Vec<Value>,
}

impl Row {
    /// `statement` of `event`'s batch as a hand-off row, if it is one.
    pub(crate) fn of(event: &VerifiedEvent, statement: &Statement) -> Option<Row> {
        let kind = Kind::of(statement)?;
        let key = match (kind, statement.params.first()) {
            (Kind::Outbox, Some(Value::Text(key))) => key.clone(),
            _ => dedupe_key(&event.source, &event.id),
        };
        Some(Row {
            kind,
            key,
            params: statement.params.clone(),
        })
    }

    fn d1(&self) -> Statement {
        Statement::new(self.kind.d1_sql(), self.params.clone())
    }
}

/// Written in the event's transaction: one row, a no-op if there (an
/// outbox row keyed by a business object another event wrote).
pub(crate) const INSERT: &str = "INSERT INTO webhook_outbox \
     (kind, key, source, event_id, params, created_at) VALUES ($1, $2, $3, $4, $5, $6) \
     ON CONFLICT (kind, key) DO NOTHING RETURNING key";

/// The rows of one event not yet handed off (after a clash with an
/// earlier attempt, whose hand-off may have been cut short).
pub(super) const PENDING: &str = "SELECT kind, key, params FROM webhook_outbox \
     WHERE source = $1 AND event_id = $2 AND handed_off_at IS NULL";

/// The relay's claim: rows past the grace period, the fewest failed tries
/// first, then the oldest, skipping any another run (or an event's attempt)
/// holds. A row D1 keeps refusing sinks behind the others.
const CLAIM_DUE: &str = "SELECT kind, key, params FROM webhook_outbox \
     WHERE handed_off_at IS NULL AND created_at <= $1 \
     ORDER BY tries, created_at LIMIT 100 FOR UPDATE SKIP LOCKED";

/// A row the relay could not hand off (D1 refused it, or it is unreadable).
const TRIED: &str = "UPDATE webhook_outbox SET tries = tries + 1 WHERE kind = $1 AND key = $2";

const MARK: &str = "UPDATE webhook_outbox SET handed_off_at = $1 \
     WHERE handed_off_at IS NULL AND (kind, key) IN (SELECT * FROM unnest($2::text[], $3::text[]))";

/// The values of a row as JSON text, and back.
pub(crate) fn encode(params: &[Value]) -> String {
    let values: Vec<Json> = params
        .iter()
        .map(|value| match value {
            Value::Text(text) => Json::from(text.as_str()),
            Value::Int(n) => Json::from(*n),
            Value::Real(n) => Json::from(*n),
            Value::Null => Json::Null,
        })
        .collect();
    Json::from(values).to_string()
}

fn decode(text: &str) -> Option<Vec<Value>> {
    let Json::Array(values) = serde_json::from_str(text).ok()? else {
        return None;
    };
    values
        .into_iter()
        .map(|value| match value {
            Json::String(text) => Some(Value::Text(text)),
            Json::Number(n) => n.as_i64().map(Value::Int).or(n.as_f64().map(Value::Real)),
            Json::Null => Some(Value::Null),
            _ => None,
        })
        .collect()
}

/// Reads rows selected as `kind, key, params`; an unreadable one is logged
/// and left out (never marked, so it stays visible).
pub(super) fn read(rows: Vec<tokio_postgres::Row>) -> Vec<Row> {
    read_all(rows).0
}

/// The rows read, and the `(kind, key)` of each unreadable one.
fn read_all(rows: Vec<tokio_postgres::Row>) -> (Vec<Row>, Vec<(String, String)>) {
    let (mut read, mut unreadable) = (Vec::new(), Vec::new());
    for row in rows {
        let got = (row.try_get(0), row.try_get(1), row.try_get(2));
        let (Ok(kind), Ok(key), Ok(params)) = got else {
            continue;
        };
        let (kind, key, params): (String, String, String) = (kind, key, params);
        match Kind::named(&kind).zip(decode(&params)) {
            Some((kind, params)) => read.push(Row { kind, key, params }),
            None => {
                log::error(&Line::new("handoff_unreadable").detail(format!("{kind} {key}")));
                unreadable.push((kind, key));
            }
        }
    }
    (read, unreadable)
}

/// Copies `rows` to D1, then marks them handed off. D1 refusing is logged
/// and left to the relay: the event's effect has committed either way.
pub(super) async fn deliver(env: &Env, client: &Client, rows: &[Row]) -> Result<(), PgError> {
    if rows.is_empty() {
        return Ok(());
    }
    let statements: Vec<Statement> = rows.iter().map(Row::d1).collect();
    if let Err(e) = Db::from_env(env)?.batch(&statements).await {
        log::error(&Line::new("handoff_failed").error(e));
        return Ok(());
    }
    mark(client, rows).await
}

async fn mark(client: &Client, rows: &[Row]) -> Result<(), PgError> {
    let kinds: Vec<&str> = rows.iter().map(|row| row.kind.name()).collect();
    let keys: Vec<&str> = rows.iter().map(|row| row.key.as_str()).collect();
    let now = now_ms();
    client
        .execute_typed(
            MARK,
            &[
                (&now, Type::INT8),
                (&kinds, Type::TEXT_ARRAY),
                (&keys, Type::TEXT_ARRAY),
            ],
        )
        .await?;
    Ok(())
}

/// The cron's run: the relay, when effects commit in Postgres; logged as
/// `handoff_relay` (with how many rows it handed off) or
/// `handoff_relay_failed`.
pub(crate) async fn run(env: &Env, settings: &Settings) {
    let store = settings.inbox().map(|inbox| inbox.store);
    let (Ok(Store::Postgres), Ok(outbox)) = (store, settings.outbox()) else {
        return;
    };
    match relay(env, outbox.relay_grace_ms).await {
        Ok(0) => {}
        Ok(sent) => log::info(&Line::new("handoff_relay").sent(sent)),
        // Logged once per isolate, as `store_behind`, naming the migration.
        Err(PgError::Behind(_)) => {}
        Err(e) => log::error(&Line::new("handoff_relay_failed").error(e.message())),
    }
}

/// The cron relay: hands off up to 100 rows left past `grace_ms` (an
/// attempt cut short between its commit and its hand-off), in one
/// transaction that holds them with `FOR UPDATE SKIP LOCKED`. Should D1
/// refuse the batch, each row goes on its own, and one it refuses (or one
/// unreadable) counts a try, so that it cannot hold the others back.
/// Returns how many it handed off.
async fn relay(env: &Env, grace_ms: i64) -> Result<usize, PgError> {
    let due = now_ms() - grace_ms;
    with_client(env, async |client: &Client| {
        let (begun, claimed) = join(
            begin(client),
            client.query_typed(CLAIM_DUE, &[(&due, Type::INT8)]),
        )
        .await;
        begun?;
        let (rows, mut refused) = read_all(claimed?);
        let db = Db::from_env(env)?;
        let statements: Vec<Statement> = rows.iter().map(Row::d1).collect();
        let mut copied = rows.clone();
        if !rows.is_empty() {
            if let Err(e) = db.batch(&statements).await {
                log::error(&Line::new("handoff_relay_failed").error(e));
                copied.clear();
                // Within half the unit's deadline, so that what it learned
                // (which rows D1 takes, which it refuses) is kept.
                let until = now_ms() + 2_500;
                for (row, statement) in rows.iter().zip(&statements) {
                    if now_ms() > until {
                        break;
                    }
                    match db.batch(std::slice::from_ref(statement)).await {
                        Ok(()) => copied.push(row.clone()),
                        Err(_) => refused.push((row.kind.name().to_string(), row.key.clone())),
                    }
                }
            }
        }
        let tried_params: Vec<[(&(dyn ToSql + Sync), Type); 2]> = refused
            .iter()
            .map(|(kind, key)| -> [(&(dyn ToSql + Sync), Type); 2] {
                [(kind, Type::TEXT), (key, Type::TEXT)]
            })
            .collect();
        let tried = tried_params
            .iter()
            .map(|params| client.execute_typed(TRIED, params));
        let (marked, tried, committed) = join3(
            mark(client, &copied),
            join_all(tried),
            client.batch_execute("COMMIT"),
        )
        .await;
        marked?;
        tried.into_iter().collect::<Result<Vec<_>, _>>()?;
        committed?;
        Ok(copied.len())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_survive_their_json_text() {
        let params = vec![
            Value::Text("a \"quoted\" ✓".into()),
            Value::Int(-9_007_199_254_740_993),
            Value::Real(0.25),
            Value::Null,
        ];
        assert_eq!(decode(&encode(&params)), Some(params));
        assert_eq!(decode("{}"), None);
        assert_eq!(decode("[[1]]"), None);
    }

    #[test]
    fn the_batch_tells_its_hand_off_rows_from_the_effect_writes() {
        let event = VerifiedEvent::example("example", "ping", "{}");
        let ledger = ledger::row(&event, 2);
        let row = Row::of(&event, &ledger).unwrap();
        assert_eq!(
            (row.kind, row.key.as_str()),
            (Kind::Ledger, "example:evt_1")
        );
        assert_eq!(row.d1().sql, ledger::MIRROR);
        let write = Statement::new("UPDATE things SET n = n + 1", Vec::new());
        assert_eq!(Row::of(&event, &write), None);
        for kind in [Kind::Ledger, Kind::Outbox, Kind::Forwards] {
            assert_eq!(Kind::named(kind.name()), Some(kind));
            assert!(kind.d1_sql().contains("DO NOTHING"), "{kind:?}");
        }
    }
}
