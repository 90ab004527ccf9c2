//! Your effect, proven on the host in `cargo test` (feature `testing`, on
//! in the app's dev-dependency): the event a provider's request makes, your
//! planner, and its statements committed with the engine's own ledger row
//! in ONE transaction, as the worker commits them, to a real database made
//! from this copy's migrations. Then the test reads rows.
//!
//! ```ignore
//! let mut db = TestDb::new();
//! let event = testing::event("stripe", &[], REFUND);
//! assert_eq!(db.apply(EFFECTS, &event), Applied::Now);
//! assert_eq!(db.apply(EFFECTS, &event), Applied::Earlier); // a duplicate writes nothing
//! assert_eq!(db.rows("SELECT amount FROM refunds", vec![]), [row![500]]);
//! ```
//!
//! Two backends, both real: SQLite (bundled; D1 is SQLite), the store of a
//! D1 copy, and Postgres (feature `postgres`) in the copy's test cluster,
//! the store of a Postgres copy. A statement that fails names the effect,
//! the event type and the SQL, with the database's own words.

mod cluster;
#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;

use std::fmt;
use std::path::PathBuf;

use crate::d1::Value;
use crate::effects::{self, Effects};
use crate::event::VerifiedEvent;
pub use crate::ledger::Applied;
use crate::providers::{self, Identity, RawRequest, SourceConfig};

/// A row as [`TestDb::rows`] returns it: `row!["paid", 2000, None::<i64>]`
/// is `vec![Value::Text("paid".into()), Value::Int(2000), Value::Null]`.
#[macro_export]
macro_rules! row {
    ($($value:expr),* $(,)?) => {
        vec![$($crate::effects::Value::from($value)),*]
    };
}
pub use crate::row;

/// A database made from this copy's migrations, empty but for them, and
/// dropped with the value: each test has its own.
pub struct TestDb {
    backend: Backend,
}

enum Backend {
    Sqlite(sqlite::Sqlite),
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Postgres>),
}

/// Why an event's effect did not commit: what [`TestDb::apply`] panics
/// with, and [`TestDb::try_apply`] returns for a test that expects it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EffectFailed {
    /// The provider and event type whose line in `EFFECTS` planned it.
    pub effect: String,
    /// The statement that failed, as written (the engine's ledger row, or
    /// one of the effect's); `None` where planning or the commit failed.
    pub sql: Option<String>,
    /// The database's own error, or why the engine would not send the
    /// statement, or why planning failed.
    pub error: String,
    /// SQLite (as D1 runs it) or Postgres.
    pub store: &'static str,
    /// Whether the database said so.
    said: bool,
}

impl fmt::Display for EffectFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (effect, store) = (&self.effect, self.store);
        let Some(sql) = &self.sql else {
            // Planning failed (no store was asked), or the commit did.
            return match self.said {
                true => write!(
                    f,
                    "the effect of {effect} failed on {store}: {}",
                    self.error
                ),
                false => write!(f, "the effect of {effect} {}", self.error),
            };
        };
        write!(
            f,
            "the effect of {effect} failed on {store}\n  statement: {sql}\n"
        )?;
        match self.said {
            true => write!(f, "  {store} said: {}", self.error),
            false => write!(f, "  not sent (the engine refuses it): {}", self.error),
        }
    }
}

impl std::error::Error for EffectFailed {}

impl Default for TestDb {
    fn default() -> Self {
        TestDb::new()
    }
}

impl TestDb {
    /// A database of this copy's store: Postgres where the `postgres`
    /// feature is on (a Postgres copy), else SQLite, as D1 runs it.
    #[track_caller]
    pub fn new() -> TestDb {
        #[cfg(feature = "postgres")]
        return TestDb::postgres();
        #[cfg(not(feature = "postgres"))]
        return TestDb::sqlite();
    }

    /// SQLite in memory, made from `migrations/` in order, foreign keys
    /// enforced as D1 enforces them.
    #[track_caller]
    pub fn sqlite() -> TestDb {
        match sqlite::Sqlite::open(&migrations("migrations")) {
            Ok(db) => TestDb {
                backend: Backend::Sqlite(db),
            },
            Err(e) => panic!("{e}"),
        }
    }

    /// A database of its own in the copy's test Postgres (started if need
    /// be: `scripts/postgres.sh`), made from `migrations-postgres/` in
    /// order. `TEST_POSTGRES_URL` names another server instead.
    #[cfg(feature = "postgres")]
    #[track_caller]
    pub fn postgres() -> TestDb {
        match postgres::Postgres::open(&migrations("migrations-postgres")) {
            Ok(db) => TestDb {
                backend: Backend::Postgres(Box::new(db)),
            },
            Err(e) => panic!("{e}"),
        }
    }

    /// Plans `event` by `effects` and commits its batch as the worker does:
    /// the ledger row, the effect's writes and its outbox rows, in one
    /// transaction. [`Applied::Earlier`] for an event already committed (a
    /// duplicate: nothing written). Panics, saying why, on a failure, and
    /// where `effects` has no line for the event.
    #[track_caller]
    pub fn apply(&mut self, effects: &Effects, event: &VerifiedEvent) -> Applied {
        match self.try_apply(effects, event) {
            Ok(applied) => applied,
            Err(failed) => panic!("{failed}"),
        }
    }

    /// [`TestDb::apply`], its failure returned: for a test that proves a
    /// constraint refuses an event.
    #[track_caller]
    pub fn try_apply(
        &mut self,
        effects: &Effects,
        event: &VerifiedEvent,
    ) -> Result<Applied, EffectFailed> {
        let effect = format!("{} `{}`", event.provider, event.kind);
        if !effects
            .iter()
            .any(|(provider, kind, _)| *provider == event.provider && *kind == event.kind)
        {
            panic!(
                "EFFECTS has no line for {effect}: add (\"{}\", \"{}\", <planner>)",
                event.provider, event.kind
            );
        }
        let store = self.store();
        let failed = |failure: Failure| EffectFailed {
            effect: effect.clone(),
            sql: failure
                .sql
                .map(|sql| sql.split_whitespace().collect::<Vec<_>>().join(" ")),
            error: failure.error,
            store,
            said: failure.said,
        };
        let plan = effects::plan_with(effects, event, event.received_at + 1).map_err(|e| {
            failed(Failure {
                sql: None,
                error: format!("did not plan: {e}"),
                said: false,
            })
        })?;
        let applied = match &mut self.backend {
            Backend::Sqlite(db) => db.apply(event, &plan),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.apply(event, &plan),
        };
        applied.map_err(failed)
    }

    /// The rows `sql` returns, `?1`, `?2`, … bound to `params`: integers as
    /// [`Value::Int`], text as [`Value::Text`], and so on. Panics with the
    /// database's error.
    #[track_caller]
    pub fn rows(&mut self, sql: &str, params: Vec<Value>) -> Vec<Vec<Value>> {
        let rows = match &mut self.backend {
            Backend::Sqlite(db) => db.rows(sql, &params),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.rows(sql, &params),
        };
        match rows {
            Ok(rows) => rows,
            Err(e) => panic!("{}: {e}\n  query: {sql}", self.store()),
        }
    }

    /// Runs `sql` (a row to start from, a test's own setup): each `;`
    /// separated statement, no parameters.
    #[track_caller]
    pub fn execute(&mut self, sql: &str) {
        let done = match &mut self.backend {
            Backend::Sqlite(db) => db.execute(sql),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.execute(sql),
        };
        if let Err(e) = done {
            panic!("{}: {e}\n  sql: {sql}", self.store());
        }
    }

    /// Which database this is, as failures name it.
    pub fn store(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "SQLite (as D1)",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "Postgres",
        }
    }
}

/// The event a request of `provider` makes: the engine's own provider
/// reads its id and type from `headers` and `body`, as the worker does
/// once the signature has checked out (it is not checked here). Its source
/// is named after the provider; it arrived at 1,000 ms. Panics where the
/// provider finds no event in it.
#[track_caller]
pub fn event(provider: &str, headers: &[(&str, &str)], body: &str) -> VerifiedEvent {
    let verifier = match providers::build(&SourceConfig::new(provider), &[]) {
        Ok(verifier) => verifier,
        Err(e) => panic!("provider {provider}: {e}"),
    };
    let headers = headers.iter().map(|(n, v)| (n.to_string(), v.to_string()));
    let request = RawRequest::new("https://example.com/", headers, body.as_bytes().to_vec());
    let identity = match verifier.identify(&request) {
        Ok(Identity::Event(identity)) => identity,
        Ok(_) => panic!("this {provider} request is not an event (a handshake?)"),
        Err(e) => panic!("{provider} finds no event in this request: {}", e.reason()),
    };
    let mut event = VerifiedEvent::example(provider, &identity.kind, body);
    event.id = identity.id;
    event.fence = verifier.replay_fence(&request);
    event
}

/// The `.sql` files of the app's folder `dir` (beside its Cargo.toml), in
/// name order: the engine's and the app's migrations, as they are applied.
#[track_caller]
fn migrations(dir: &str) -> Vec<(String, String)> {
    let root = cluster::app_root();
    let folder: PathBuf = root.join(dir);
    let entries = match std::fs::read_dir(&folder) {
        Ok(entries) => entries,
        Err(e) => panic!("{}: {e} (the copy's migrations)", folder.display()),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let sql = match std::fs::read_to_string(&path) {
                Ok(sql) => sql,
                Err(e) => panic!("{}: {e}", path.display()),
            };
            (
                path.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                sql,
            )
        })
        .collect()
}

/// Why a backend did not commit: the statement, if one failed, and whose
/// words say why.
struct Failure {
    sql: Option<&'static str>,
    error: String,
    /// The database's words, not the engine's refusal to send it.
    said: bool,
}

impl Failure {
    /// The database refused it.
    fn said(sql: Option<&'static str>, error: String) -> Failure {
        Failure {
            sql,
            error,
            said: true,
        }
    }

    /// The engine would not send it.
    fn refused(sql: &'static str, error: String) -> Failure {
        Failure {
            sql: Some(sql),
            error,
            said: false,
        }
    }
}

#[cfg(test)]
mod tests;
