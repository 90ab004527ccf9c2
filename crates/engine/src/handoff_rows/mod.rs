//! The rows an event committed in Postgres owes D1's engine tables: its
//! ledger row (for the failed list, the alerts, the admin pages), its
//! outbox rows and its deliveries. The event writes them to
//! `webhook_outbox` in its transaction; after the commit they ride on the
//! event's queue messages, and the consumer writes them to D1 in the batch
//! that claims the message's row, so that the event spends no D1 call of
//! its own on them. Rows without a message to ride, or too big for one,
//! are copied to D1 before the messages go. The cron relay copies them
//! again and marks them handed off (see `postgres::relay`), which also
//! covers a message lost. Every copy is a no-op when D1 holds the row.

use serde_json::Value as Json;
use worker::Env;

use crate::d1::{Db, Statement, Value};
use crate::event::{dedupe_key, VerifiedEvent};
use crate::log::{self, Line};
use crate::{forward, ledger, outbox};

mod riding;

pub(crate) use riding::{carried, claim_after, ride, Riding};

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

    pub(crate) fn named(name: &str) -> Option<Kind> {
        [Kind::Ledger, Kind::Outbox, Kind::Forwards]
            .into_iter()
            .find(|kind| kind.name() == name)
    }

    /// How many values such a row holds: its D1 statement's parameters.
    pub(crate) fn values(self) -> usize {
        match self {
            Kind::Ledger | Kind::Outbox => 6,
            Kind::Forwards => 5,
        }
    }

    /// The D1 statement writing any number of such rows, listed as JSON by
    /// [`d1_batch`]: one statement per kind, however many rows, a no-op
    /// for each row that is there (the columns the D1 store writes).
    fn d1_bulk_sql(self) -> &'static str {
        match self {
            Kind::Ledger => {
                "INSERT INTO processed_events \
                 (source, event_id, type, received_at, processed_at, fence_sha256) \
                 SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
                  json_extract(value, '$[2]'), json_extract(value, '$[3]'), \
                  json_extract(value, '$[4]'), json_extract(value, '$[5]') \
                 FROM json_each(?1) WHERE true ON CONFLICT DO NOTHING"
            }
            Kind::Outbox => {
                "INSERT INTO outbox \
                 (idempotency_key, source, event_id, action, payload, next_attempt_at, \
                  created_at, updated_at) \
                 SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
                  json_extract(value, '$[2]'), json_extract(value, '$[3]'), \
                  json_extract(value, '$[4]'), json_extract(value, '$[5]'), \
                  json_extract(value, '$[5]'), json_extract(value, '$[5]') \
                 FROM json_each(?1) WHERE true ON CONFLICT (idempotency_key) DO NOTHING"
            }
            // Each row's last value lists its deliveries (`forward::insert`).
            Kind::Forwards => {
                "INSERT INTO forwards \
                 (delivery_id, source, event_id, event_type, destination, next_attempt_at, \
                  created_at, budget_from, updated_at) \
                 SELECT json_extract(d.value, '$[0]'), json_extract(r.value, '$[0]'), \
                  json_extract(r.value, '$[1]'), json_extract(r.value, '$[2]'), \
                  json_extract(d.value, '$[1]'), json_extract(r.value, '$[3]'), \
                  json_extract(r.value, '$[3]'), json_extract(r.value, '$[3]'), \
                  json_extract(r.value, '$[3]') \
                 FROM json_each(?1) AS r, json_each(json_extract(r.value, '$[4]')) AS d \
                 WHERE true ON CONFLICT (delivery_id) DO NOTHING"
            }
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
    /// When its event wrote it (ms): the ledger row's `processed_at`, the
    /// outbox row's `created_at`, the deliveries'.
    fn written_at(&self) -> Option<i64> {
        let at = match self.kind {
            Kind::Ledger => 4,
            Kind::Outbox => 5,
            Kind::Forwards => 3,
        };
        match self.params.get(at)? {
            Value::Int(ms) => Some(*ms),
            Value::Real(ms) => Some(*ms as i64),
            _ => None,
        }
    }

    /// `statement` of `event`'s batch as a hand-off row, if it is one.
    #[cfg_attr(not(any(feature = "postgres", test)), expect(dead_code))]
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
}

/// `rows` as one D1 batch of one statement per kind (more only past
/// [`LISTED_BYTES`]): D1 counts statements against a run's queries, and the
/// relay copies thousands of rows a run.
pub(crate) fn d1_batch(rows: &[Row]) -> Vec<Statement> {
    let mut statements = Vec::new();
    for kind in [Kind::Ledger, Kind::Outbox, Kind::Forwards] {
        let mut listed = String::new();
        for row in rows.iter().filter(|row| row.kind == kind) {
            let values = encode(&row.params);
            if !listed.is_empty() && listed.len() + values.len() > LISTED_BYTES {
                statements.push(bulk(kind, &mut listed));
            }
            listed.push(if listed.is_empty() { '[' } else { ',' });
            listed.push_str(&values);
        }
        if !listed.is_empty() {
            statements.push(bulk(kind, &mut listed));
        }
    }
    statements
}

/// At most so many bytes of rows in one statement: D1 takes a string of
/// 2 MB at most.
const LISTED_BYTES: usize = 1_000_000;

/// The statement writing the rows `listed` (taken), closed as a JSON array.
fn bulk(kind: Kind, listed: &mut String) -> Statement {
    listed.push(']');
    Statement::new(
        kind.d1_bulk_sql(),
        vec![Value::Text(std::mem::take(listed))],
    )
}

/// The values of a row as JSON text, and back.
pub(crate) fn encode(params: &[Value]) -> String {
    Json::from(to_json(params)).to_string()
}

#[cfg_attr(not(any(feature = "postgres", test)), expect(dead_code))]
pub(crate) fn decode(text: &str) -> Option<Vec<Value>> {
    let Json::Array(values) = serde_json::from_str(text).ok()? else {
        return None;
    };
    from_json(values)
}

/// The values of a row as JSON values, and back.
fn to_json(params: &[Value]) -> Vec<Json> {
    params
        .iter()
        .map(|value| match value {
            Value::Text(text) => Json::from(text.as_str()),
            Value::Int(n) => Json::from(*n),
            Value::Real(n) => Json::from(*n),
            Value::Null => Json::Null,
        })
        .collect()
}

fn from_json(values: Vec<Json>) -> Option<Vec<Value>> {
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

/// Copies `rows` to D1 now: what rides on no message. They stay unmarked
/// in Postgres: the relay marks them, hundreds to a transaction, after
/// copying them again (a no-op in D1), so that an event commits one
/// transaction, not two. D1 refusing is logged and left to the relay: the
/// event's effect has committed either way.
pub(crate) async fn deliver(env: &Env, rows: &[Row]) {
    if rows.is_empty() {
        return;
    }
    let copied = match Db::from_env(env) {
        Ok(db) => db.batch(&d1_batch(rows)).await,
        Err(e) => Err(e),
    };
    if let Err(e) = copied {
        log::error(&Line::new("handoff_failed").error(e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The D1 statement writing one row of `kind`, as the D1 store does, a
    /// no-op when it is there: what the bulk copy must equal.
    fn one_row_sql(kind: Kind) -> &'static str {
        match kind {
            Kind::Ledger => {
                "INSERT INTO processed_events \
                 (source, event_id, type, received_at, processed_at, fence_sha256) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING"
            }
            Kind::Outbox => outbox::INSERT_ROW,
            Kind::Forwards => forward::INSERT_ROWS,
        }
    }

    /// The highest `?N` a D1 statement binds.
    fn highest_placeholder(sql: &str) -> usize {
        sql.split('?')
            .skip(1)
            .filter_map(|rest| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .max()
            .unwrap_or(0)
    }

    fn one_row(row: &Row) -> Statement {
        Statement::new(one_row_sql(row.kind), row.params.clone())
    }

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
        let write = Statement::new("UPDATE things SET n = n + 1", Vec::new());
        assert_eq!(Row::of(&event, &write), None);
        for kind in [Kind::Ledger, Kind::Outbox, Kind::Forwards] {
            let bound = highest_placeholder(one_row_sql(kind));
            assert_eq!(bound, kind.values(), "{kind:?}");
            assert_eq!(Kind::named(kind.name()), Some(kind));
            assert!(kind.d1_bulk_sql().contains("DO NOTHING"), "{kind:?}");
        }
    }

    /// D1 (SQLite) holds the same rows, however they are copied: one
    /// statement per row, or one per kind.
    #[cfg(feature = "testing")]
    #[test]
    fn a_bulk_copy_writes_what_a_copy_per_row_writes() {
        use crate::outbox::SideEffect;
        let mut rows = Vec::new();
        for (n, id) in ["evt_1", "evt_2"].into_iter().enumerate() {
            let mut event = VerifiedEvent::example("example", "ping", "{}");
            event.id = id.into();
            event.fence = Some(format!("fence {n} with a 'quote'"));
            event.forward = Some(r#"{"to":["a","b"],"headers":[]}"#.into());
            let big = SideEffect::custom("ship", &serde_json::json!({"n": i64::MAX}));
            let (outbox, _) = outbox::insert(&event, big, 1_700_000_000_000);
            let (forwards, _) = forward::insert(&event, 1_700_000_000_001).unwrap();
            for statement in [ledger::row(&event, 2), outbox, forwards] {
                rows.push(Row::of(&event, &statement).unwrap());
            }
        }
        let schema = include_str!("../../migrations/0001_engine_schema.sql");
        let tables = ["processed_events", "outbox", "forwards"];
        let copied = |statements: Vec<Statement>| {
            let db = rusqlite::Connection::open_in_memory().unwrap();
            db.execute_batch(schema).unwrap();
            // Twice: the second copy changes nothing.
            for statement in statements.iter().chain(&statements) {
                let params: Vec<rusqlite::types::Value> = statement
                    .params
                    .iter()
                    .map(|value| match value {
                        Value::Text(text) => text.clone().into(),
                        Value::Int(n) => (*n).into(),
                        Value::Real(n) => (*n).into(),
                        Value::Null => rusqlite::types::Value::Null,
                    })
                    .collect();
                let sql = statement.sql;
                db.execute(sql, rusqlite::params_from_iter(params)).unwrap();
            }
            tables.map(|table| {
                let sql = format!("SELECT * FROM {table} ORDER BY 1, 2, 3");
                let mut select = db.prepare(&sql).unwrap();
                let width = select.column_count();
                let rows = select.query_map([], |row| {
                    (0..width)
                        .map(|i| row.get::<_, rusqlite::types::Value>(i))
                        .collect::<Result<Vec<_>, _>>()
                });
                rows.unwrap().collect::<Result<Vec<_>, _>>().unwrap()
            })
        };
        let one_by_one = copied(rows.iter().map(one_row).collect());
        let bulk = d1_batch(&rows);
        assert_eq!(bulk.len(), 3);
        assert_eq!(copied(bulk), one_by_one);
        // Rows past a statement's size go in more statements, to the same end.
        let mut big = rows.clone();
        let payload = Value::Text("x".repeat(LISTED_BYTES / 2));
        for row in big.iter_mut().filter(|row| row.kind == Kind::Outbox) {
            row.params[4] = payload.clone();
        }
        let split = d1_batch(&big);
        assert_eq!(split.len(), 4, "the two outbox rows in two statements");
        assert_eq!(copied(split), copied(big.iter().map(one_row).collect()));
        assert_eq!(one_by_one.map(|rows| rows.len()), [2, 2, 4]);
    }
}
