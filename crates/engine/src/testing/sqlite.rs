//! The SQLite backend: D1 is SQLite, so a D1 copy's effects run here as
//! they run there, in memory, one batch one transaction.

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{params_from_iter, Connection};

use super::Failure;
use crate::d1::{self, Statement, Value};
use crate::effects::Plan;
use crate::event::VerifiedEvent;
use crate::ledger::{self, Applied};
use crate::store;

pub(super) struct Sqlite(Connection);

impl Sqlite {
    /// A database in memory, `migrations` applied in order.
    pub(super) fn open(migrations: &[(String, String)]) -> Result<Sqlite, String> {
        let db = Connection::open_in_memory().map_err(|e| e.to_string())?;
        // D1 enforces foreign keys.
        db.pragma_update(None, "foreign_keys", true)
            .map_err(|e| e.to_string())?;
        for (name, sql) in migrations {
            db.execute_batch(sql)
                .map_err(|e| format!("migrations/{name} does not apply: {e}"))?;
        }
        Ok(Sqlite(db))
    }

    /// The plan's batch in one transaction, as D1 runs it: row locks left
    /// out (a write marked as one refused), integers beyond 2^53 refused, a
    /// ledger clash rolled back.
    pub(super) fn apply(&mut self, event: &VerifiedEvent, plan: &Plan) -> Result<Applied, Failure> {
        let batch = store::without_row_locks(&plan.batch)
            .map_err(|(sql, why)| Failure::refused(sql, why))?;
        let tx = self
            .0
            .transaction()
            .map_err(|e| Failure::said(None, e.to_string()))?;
        for statement in batch.iter() {
            d1::bindable(statement).map_err(|e| Failure::refused(statement.sql, e))?;
            match run(&tx, statement.sql, &statement.params) {
                Ok(_) => {}
                Err(e) if ledger::is_ledger_conflict(&e) => {
                    drop(tx);
                    return self.holder(event);
                }
                Err(e) => return Err(Failure::said(Some(statement.sql), e)),
            }
        }
        tx.commit()
            .map_err(|e| Failure::said(None, e.to_string()))?;
        Ok(Applied::Now)
    }

    /// After a ledger clash, rolled back: the row it was with.
    fn holder(&mut self, event: &VerifiedEvent) -> Result<Applied, Failure> {
        let Statement { sql, params, .. } = ledger::holder(event);
        let rows = run(&self.0, sql, &params).map_err(|e| Failure::said(None, e))?;
        match rows
            .into_iter()
            .next()
            .and_then(|row| row.into_iter().next())
        {
            Some(Value::Text(id)) => Ok(ledger::held_as(event, id)),
            _ => Err(Failure::said(None, ledger::NO_HOLDER.into())),
        }
    }

    pub(super) fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, String> {
        run(&self.0, sql, params)
    }

    pub(super) fn execute(&mut self, sql: &str) -> Result<(), String> {
        self.0.execute_batch(sql).map_err(|e| e.to_string())
    }
}

/// Runs one statement (a write, or one that returns rows): its rows.
fn run(db: &Connection, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, String> {
    let mut statement = db.prepare(sql).map_err(|e| e.to_string())?;
    let columns = statement.column_count();
    let bound = params_from_iter(params.iter().map(bound));
    let mut rows = statement.query(bound).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(|e| e.to_string())? {
        let values = (0..columns).map(|i| row.get_ref(i).map(read));
        out.push(
            values
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(out)
}

fn bound(value: &Value) -> SqlValue {
    match value {
        Value::Text(text) => SqlValue::Text(text.clone()),
        Value::Int(n) => SqlValue::Integer(*n),
        Value::Real(n) => SqlValue::Real(*n),
        Value::Null => SqlValue::Null,
    }
}

/// A column's value; a blob as its hex (no effect of the template's
/// writes one).
fn read(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Int(n),
        ValueRef::Real(n) => Value::Real(n),
        ValueRef::Text(text) => Value::Text(String::from_utf8_lossy(text).into_owned()),
        ValueRef::Blob(bytes) => Value::Text(hex::encode(bytes)),
    }
}
