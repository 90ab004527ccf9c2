//! The Postgres backend: the effect's statements sent as the worker sends
//! them (placeholders numbered, values as text of an inferred type, the
//! ledger row `ON CONFLICT DO NOTHING`, the outbox rows as hand-off rows),
//! in one transaction, in a schema of the test's own.

use std::sync::atomic::{AtomicUsize, Ordering};

use postgres_client::types::{ToSql, Type};
use postgres_client::{Client, NoTls, Row};

use super::{cluster, Refusal};
use crate::d1::Value;
use crate::effects::Plan;
use crate::event::VerifiedEvent;
use crate::ledger::{self, Applied};
use crate::postgres as pg;

pub(super) struct Postgres {
    client: Client,
    schema: String,
}

impl Postgres {
    /// A new schema on the test cluster, `migrations` applied in it in
    /// order, each in one transaction.
    pub(super) fn open(migrations: &[(String, String)]) -> Result<Postgres, String> {
        static SCHEMAS: AtomicUsize = AtomicUsize::new(0);
        let url = cluster::postgres_url()?;
        let mut client = Client::connect(&url, NoTls)
            .map_err(|e| format!("the test Postgres ({url}): {}", said(&e)))?;
        let schema = format!(
            "harness_{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::Relaxed)
        );
        let setup = format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
             SET search_path TO {schema}; SET client_min_messages TO warning"
        );
        client.batch_execute(&setup).map_err(|e| said(&e))?;
        let mut db = Postgres { client, schema };
        for (name, sql) in migrations {
            let mut tx = db.client.transaction().map_err(|e| said(&e))?;
            tx.batch_execute(sql)
                .map_err(|e| format!("migrations-postgres/{name} does not apply: {}", said(&e)))?;
            tx.commit().map_err(|e| said(&e))?;
        }
        Ok(db)
    }

    /// The plan's batch in one transaction, as the worker commits it.
    pub(super) fn apply<'a>(
        &mut self,
        event: &VerifiedEvent,
        plan: &'a Plan,
    ) -> Result<Applied, Refusal<'a>> {
        let Some((ledger, rest)) = plan.batch.split_first() else {
            return Err((None, "an empty batch".into()));
        };
        let now = event.received_at + 1;
        let mut tx = self.client.transaction().map_err(|e| (None, said(&e)))?;
        let inserted = query(&mut tx, pg::LEDGER_INSERT, &ledger.params)
            .map_err(|e| (Some(ledger), said(&e)))?;
        if inserted.is_empty() {
            let holder = ledger::holder(event);
            let held = query(&mut tx, &pg::text(&holder), &holder.params);
            drop(tx);
            return match held.map_err(|e| (None, said(&e)))?.first() {
                Some(row) => Ok(ledger::held_as(event, row.get(0))),
                None => Err((None, ledger::NO_HOLDER.into())),
            };
        }
        for statement in rest {
            let result = match pg::Row::of(event, statement) {
                None => query(&mut tx, &pg::text(statement), &statement.params),
                Some(row) => {
                    let params = [
                        Value::Text(row.kind.name().into()),
                        Value::Text(row.key.clone()),
                        Value::Text(event.source.clone()),
                        Value::Text(event.id.clone()),
                        Value::Text(pg::encode_row(&row.params)),
                        Value::Int(now),
                    ];
                    query(&mut tx, pg::INSERT_ROW, &params)
                }
            };
            result.map_err(|e| (Some(statement), said(&e)))?;
        }
        tx.commit().map_err(|e| (None, said(&e)))?;
        Ok(Applied::Now)
    }

    pub(super) fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, String> {
        let rows = query(&mut self.client, &pg::numbered(sql), params).map_err(|e| said(&e))?;
        rows.iter().map(read).collect()
    }

    pub(super) fn execute(&mut self, sql: &str) -> Result<(), String> {
        self.client.batch_execute(sql).map_err(|e| said(&e))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let drop = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        let _ = self.client.batch_execute(&drop);
    }
}

/// One statement, its values sent as the worker sends them.
fn query(
    client: &mut impl postgres_client::GenericClient,
    sql: &str,
    values: &[Value],
) -> Result<Vec<Row>, postgres_client::Error> {
    let params = pg::params(values);
    let typed: Vec<(&(dyn ToSql + Sync), Type)> = pg::typed(&params);
    client.query_typed(sql, &typed)
}

/// Postgres's own words: the SQLSTATE, the message, and its detail and
/// hint (the test's own values: a test may show them).
fn said(error: &postgres_client::Error) -> String {
    let Some(db) = error.as_db_error() else {
        return error.to_string();
    };
    let mut out = format!("{} {}", db.code().code(), db.message());
    for (what, text) in [("detail", db.detail()), ("hint", db.hint())] {
        if let Some(text) = text {
            out.push_str(&format!("\n    {what}: {text}"));
        }
    }
    out
}

/// A row's values: integers, floats, text and booleans (as 0 or 1, as
/// SQLite keeps them); another type is named, to be cast in the query.
fn read(row: &Row) -> Result<Vec<Value>, String> {
    let value = |i: usize| -> Result<Value, postgres_client::Error> {
        let ty = row.columns()[i].type_();
        Ok(match *ty {
            Type::INT2 => row.get::<_, Option<i16>>(i).map(i64::from).into(),
            Type::INT4 => row.get::<_, Option<i32>>(i).map(i64::from).into(),
            Type::INT8 => row.get::<_, Option<i64>>(i).into(),
            Type::FLOAT4 => row.get::<_, Option<f32>>(i).map(f64::from).into(),
            Type::FLOAT8 => row.get::<_, Option<f64>>(i).into(),
            Type::BOOL => row.get::<_, Option<bool>>(i).map(i64::from).into(),
            _ => row.try_get::<_, Option<String>>(i)?.into(),
        })
    };
    (0..row.len())
        .map(|i| {
            value(i).map_err(|_| {
                format!(
                    "column {} is of type {}: cast it to text in the query",
                    row.columns()[i].name(),
                    row.columns()[i].type_()
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::PgError;

    fn client() -> Client {
        Client::connect(&cluster::postgres_url().unwrap(), NoTls).unwrap()
    }

    /// Real errors from a real server, as the worker's store would meet
    /// them: an app's bug is a refusal (the event spends an attempt, and
    /// ends listed as failed), never an outage (an endless 503).
    #[test]
    fn an_apps_bug_is_refused_and_an_outage_is_unavailable() {
        let mut db = client();
        let values = [Value::Text("a".into())];
        let too_few = query(&mut db, "SELECT $1::text, $2::text", &values).unwrap_err();
        let refused = PgError::from(too_few);
        assert!(
            matches!(&refused, PgError::Refused(why) if why.starts_with("08P01 ")),
            "{refused:?}"
        );
        let row = query(&mut db, "SELECT 'x'::text", &[]).unwrap();
        let undecodable = PgError::from(row[0].try_get::<_, i32>(0).unwrap_err());
        assert!(
            matches!(undecodable, PgError::Refused(_)),
            "{undecodable:?}"
        );
        let down = Client::connect("postgresql://nobody@127.0.0.1:1/none", NoTls)
            .err()
            .unwrap();
        assert!(matches!(PgError::from(down), PgError::Unavailable(_)));
    }

    #[test]
    fn a_refused_value_is_never_in_the_message() {
        let mut db = client();
        for sql in [
            "SELECT 'ann@example.com'::int",
            "SELECT 'ann@example.com'::date",
            "SELECT 99999999999::int",
        ] {
            let error = PgError::from(query(&mut db, sql, &[]).unwrap_err());
            let message = error.message();
            assert!(message.starts_with("postgres refused: 22"), "{message}");
            assert!(
                !message.contains("ann@") && !message.contains("9999"),
                "{message}"
            );
        }
    }
}
