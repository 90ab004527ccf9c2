//! The Postgres backend: the effect's statements sent as the worker sends
//! them (placeholders numbered, values as text of an inferred type, the
//! ledger row `ON CONFLICT DO NOTHING`, then the writes, then the rows it
//! hands off to D1), in one transaction, in a database of the test's own
//! (so that a migration's `CREATE EXTENSION` is the test's own too).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use postgres_client::error::SqlState;
use postgres_client::types::{ToSql, Type};
use postgres_client::{Client, NoTls, Row};

use super::{cluster, Failure};
use crate::d1::{Statement, Value};
use crate::effects::Plan;
use crate::event::VerifiedEvent;
use crate::handoff_rows::Row as HandOff;
use crate::ledger::{self, Applied};
use crate::postgres as pg;

/// A database of the test's own, dropped with it.
pub(super) struct Postgres {
    /// `None` once dropped: closed before its database is.
    client: Option<Client>,
    name: String,
}

impl Postgres {
    /// A new database on the test cluster, `migrations` applied in it in
    /// order, each in one transaction.
    pub(super) fn open(migrations: &[(String, String)]) -> Result<Postgres, String> {
        static DATABASES: AtomicUsize = AtomicUsize::new(0);
        let (pid, n) = (
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed),
        );
        let name = format!("harness_{pid}_{n}");
        maintain(&format!("CREATE DATABASE {name}"))?;
        let mut config: postgres_client::Config =
            cluster::postgres_url()?.parse().map_err(|e| said(&e))?;
        config.dbname(&name);
        let client = match config.connect(NoTls) {
            Ok(client) => client,
            Err(e) => {
                let _ = maintain(&format!("DROP DATABASE IF EXISTS {name}"));
                return Err(said(&e));
            }
        };
        // Dropped with its database from here on, whatever fails next.
        let mut db = Postgres {
            client: Some(client),
            name,
        };
        let client = db.client();
        client
            .batch_execute("SET client_min_messages TO warning")
            .map_err(|e| said(&e))?;
        for (file, sql) in migrations {
            let mut tx = client.transaction().map_err(|e| said(&e))?;
            tx.batch_execute(sql)
                .map_err(|e| format!("migrations-postgres/{file} does not apply: {}", said(&e)))?;
            tx.commit().map_err(|e| said(&e))?;
        }
        Ok(db)
    }

    /// The plan's batch in one transaction, as `postgres::apply` commits it:
    /// what cannot be sent is refused first; the ledger row, and on a clash
    /// the row it clashed with; the effect's writes; the hand-off rows.
    pub(super) fn apply(&mut self, event: &VerifiedEvent, plan: &Plan) -> Result<Applied, Failure> {
        let Some((ledger, rest)) = plan.batch.split_first() else {
            return Err(Failure::said(None, "an empty batch".into()));
        };
        let writes: Vec<&Statement> = rest
            .iter()
            .filter(|s| HandOff::of(event, s).is_none())
            .collect();
        for write in &writes {
            if let Some(why) = pg::unsendable(write) {
                return Err(Failure::refused(write.sql, why));
            }
        }
        let rows: Vec<HandOff> = plan
            .batch
            .iter()
            .filter_map(|s| HandOff::of(event, s))
            .collect();
        let failed = |sql: Option<&'static str>| {
            move |e: postgres_client::Error| Failure::said(sql, said(&e))
        };
        let mut tx = self.client().transaction().map_err(failed(None))?;
        let ledger_sql = pg::LEDGER_INSERT;
        match query(&mut tx, ledger_sql, ledger_sql, &ledger.params) {
            // The ledger holds the event: the transaction is aborted.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                drop(tx);
                let holder = ledger::holder(event);
                let held = query(
                    self.client(),
                    &pg::text(&holder),
                    holder.sql,
                    &holder.params,
                );
                return match held.map_err(failed(None))?.first() {
                    Some(row) => Ok(ledger::held_as(event, row.get(0))),
                    None => Err(Failure::said(None, ledger::NO_HOLDER.into())),
                };
            }
            held => held.map_err(failed(Some(ledger.sql)))?,
        };
        for write in writes {
            query(&mut tx, &pg::text(write), write.sql, &write.params)
                .map_err(failed(Some(write.sql)))?;
        }
        if !rows.is_empty() {
            let params = [
                Value::Text(pg::listed_rows(&rows)),
                Value::Text(event.source.clone()),
                Value::Text(event.id.clone()),
                Value::Int(event.received_at + 1),
            ];
            query(&mut tx, pg::INSERT_ROWS, pg::INSERT_ROWS, &params).map_err(failed(None))?;
        }
        tx.commit().map_err(failed(None))?;
        Ok(Applied::Now)
    }

    pub(super) fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, String> {
        let rows = query(self.client(), &pg::numbered(sql), sql, params).map_err(|e| said(&e))?;
        rows.iter().map(read).collect()
    }

    pub(super) fn execute(&mut self, sql: &str) -> Result<(), String> {
        self.client().batch_execute(sql).map_err(|e| said(&e))
    }

    fn client(&mut self) -> &mut Client {
        self.client
            .as_mut()
            .expect("a test's client lives as long as its database")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        drop(self.client.take());
        let _ = maintain(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// Runs `sql` on the database the cluster's URL names, one connection per
/// process (connected again if it was lost): creating and dropping the
/// tests' databases. Each new connection first drops what a killed test
/// process left.
fn maintain(sql: &str) -> Result<(), String> {
    static CLIENT: OnceLock<Mutex<Option<Client>>> = OnceLock::new();
    let mut client = CLIENT
        .get_or_init(|| Mutex::new(None))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if client.as_ref().is_none_or(Client::is_closed) {
        let mut new = Client::connect(&cluster::postgres_url()?, NoTls).map_err(|e| said(&e))?;
        for name in left_behind(&mut new) {
            let _ = new.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"));
        }
        *client = Some(new);
    }
    let done = client.as_mut().map(|c| c.batch_execute(sql));
    match done {
        Some(Err(e)) if client.as_ref().is_some_and(Client::is_closed) => {
            // Lost mid-way (a restart): once more, on a new connection.
            *client = None;
            drop(client);
            maintain(sql).map_err(|again| format!("{}; then {again}", said(&e)))
        }
        Some(done) => done.map_err(|e| said(&e)),
        None => Err("no maintenance connection".into()),
    }
}

/// The tests' databases on the test cluster whose process is gone (where
/// `/proc` tells) and that nobody is connected to. None on a server
/// `TEST_POSTGRES_URL` names: others may share it.
fn left_behind(client: &mut Client) -> Vec<String> {
    let named = std::env::var_os("TEST_POSTGRES_URL").is_some();
    if named || !std::path::Path::new("/proc/self").exists() {
        return Vec::new();
    }
    let sql = "SELECT datname FROM pg_database d WHERE datname ~ '^harness_[0-9]+_[0-9]+$' \
         AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)";
    let names: Vec<String> = match client.query(sql, &[]) {
        Ok(rows) => rows.iter().map(|row| row.get(0)).collect(),
        Err(_) => return Vec::new(),
    };
    let gone = |name: &String| {
        let pid = name.split('_').nth(1).unwrap_or_default();
        !std::path::Path::new("/proc").join(pid).exists()
    };
    names.into_iter().filter(gone).collect()
}

/// One statement, sent as `sent`, its values typed as the worker types
/// them for the SQL as written (`written`).
fn query(
    client: &mut impl postgres_client::GenericClient,
    sent: &str,
    written: &str,
    values: &[Value],
) -> Result<Vec<Row>, postgres_client::Error> {
    let params = pg::params(values);
    let typed: Vec<(&(dyn ToSql + Sync), Type)> = pg::typed_for(written, &params);
    client.query_typed(sent, &typed)
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
            Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(i64::from).into(),
            Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(i64::from).into(),
            Type::INT8 => row.try_get::<_, Option<i64>>(i)?.into(),
            Type::FLOAT4 => row.try_get::<_, Option<f32>>(i)?.map(f64::from).into(),
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.into(),
            Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(i64::from).into(),
            _ => row.try_get::<_, Option<String>>(i)?.into(),
        })
    };
    let named = |i: usize| {
        let column = &row.columns()[i];
        format!(
            "column {} is of type {}: cast it to text in the query",
            column.name(),
            column.type_()
        )
    };
    (0..row.len())
        .map(|i| value(i).map_err(|_| named(i)))
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
        let too_few = query(&mut db, "SELECT $1::text, $2::text", "", &values).unwrap_err();
        let refused = PgError::from(too_few);
        assert!(
            matches!(&refused, PgError::Refused(why) if why.starts_with("08P01 ")),
            "{refused:?}"
        );
        let row = query(&mut db, "SELECT 'x'::text", "", &[]).unwrap();
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
            "DO $$ BEGIN RAISE EXCEPTION 'bad %', 'ann@example.com'; END $$",
            "DO $$ BEGIN RAISE 'dup %', 'ann@example.com' USING ERRCODE = 'unique_violation'; END $$",
        ] {
            let error = PgError::from(query(&mut db, sql, sql, &[]).unwrap_err());
            let message = error.message();
            assert!(message.starts_with("postgres refused: "), "{message}");
            assert!(
                !message.contains("ann@") && !message.contains("9999"),
                "{message}"
            );
        }
    }
}
