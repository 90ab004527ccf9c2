//! D1, one way for everything: effects, failed events, counters, the outbox
//! and the admin queries.
//!
//! A [`Statement`] is SQL with its parameters as plain Rust values, so that
//! an effect's plan is data, built and tested on the host; only [`Db`]
//! binds and runs it. Rows with several columns come back as JSON text that
//! SQLite builds (`json_object(…)`, or `json_group_array(…)` for a list) in
//! one column named `json`, decoded with serde_json into a typed struct:
//! one decoder in the wasm, and a list is one value, not a JS array of
//! objects. A single text column is read as it is ([`Db::text`]).

#[cfg(any(feature = "admin", feature = "dashboard"))]
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
#[cfg(any(feature = "admin", feature = "dashboard"))]
use serde::Serialize;
#[cfg(any(feature = "admin", feature = "dashboard"))]
use serde_json::value::RawValue;
use worker::wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, Env, Result};

use crate::log::{self, Line};

/// A bound SQL parameter.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// A string.
    Text(String),
    /// An integer.
    Int(i64),
    /// A number compared back exactly as it was read (an outbox lease).
    Real(f64),
    /// SQL NULL.
    Null,
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

impl From<f64> for Value {
    fn from(n: f64) -> Self {
        Value::Real(n)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// `sql` from its first word: past white space and comments.
fn code_start(mut sql: &str) -> &str {
    loop {
        sql = sql.trim_start();
        if let Some(rest) = sql.strip_prefix("--") {
            sql = rest.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(rest) = sql.strip_prefix("/*") {
            sql = rest.split_once("*/").map_or("", |(_, after)| after);
        } else {
            return sql;
        }
    }
}

/// The largest integer a JavaScript number holds exactly (2^53 - 1).
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

impl Value {
    fn to_js(&self) -> JsValue {
        match self {
            Value::Text(s) => JsValue::from_str(s),
            // Exact: `bindable` refused what a JS number would round.
            Value::Int(n) => JsValue::from_f64(*n as f64),
            Value::Real(n) => JsValue::from_f64(*n),
            Value::Null => JsValue::NULL,
        }
    }
}

/// One SQL statement and its parameters (`?1`, `?2`, … in order), made by
/// [`Statement::new`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Statement {
    /// The SQL, with `?1`, `?2`, … for the parameters; a constant, so that
    /// no value is ever spliced into it.
    pub sql: &'static str,
    /// The values bound to `?1`, `?2`, … in order.
    pub params: Vec<Value>,
    /// Whether it is a row lock ([`Statement::for_update`]).
    pub(crate) for_update: bool,
}

impl Statement {
    /// The statement `sql` with `params` bound in order.
    pub fn new(sql: &'static str, params: Vec<Value>) -> Self {
        Statement {
            sql,
            params,
            for_update: false,
        }
    }

    /// This `SELECT` as a row lock: Postgres runs it with `FOR UPDATE`
    /// appended, so that two events' transactions that write one row take
    /// turns (docs/postgres.md); D1, which runs each batch alone, needs no
    /// lock and leaves it out. A flag, not text: both stores read it alike.
    pub fn for_update(mut self) -> Self {
        self.for_update = true;
        self
    }

    /// Why this statement cannot be what it is marked: only a `SELECT` is a
    /// row lock. Refused on both stores, so that D1 never leaves out a
    /// write marked by mistake.
    pub(crate) fn misplaced_lock(&self) -> Option<String> {
        let head = code_start(self.sql);
        let word = head.get(..6).filter(|w| w.eq_ignore_ascii_case("select"));
        let ends = |rest: &str| !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_');
        let select = word.is_some_and(|_| ends(&head[6..])) || head.starts_with('(');
        (self.for_update && !select)
            .then(|| "it is marked for_update(), which only a SELECT can be".to_string())
    }
}

/// Whether D1 can bind `statement`'s values as they are: it binds
/// JavaScript numbers, which round an integer beyond 2^53 (an id, an
/// amount in a small unit) to another value. Such a statement is refused,
/// naming the parameter and the SQL (never the value, which may be the
/// payload's): the effect should send it as text.
pub(crate) fn bindable(statement: &Statement) -> std::result::Result<(), String> {
    let beyond =
        |v: &Value| matches!(v, Value::Int(n) if n.unsigned_abs() > MAX_SAFE_INTEGER as u64);
    match statement.params.iter().position(beyond) {
        None => Ok(()),
        Some(i) => Err(format!(
            "parameter ?{} of `{}` is an integer beyond ±(2^53 - 1), which D1 cannot bind \
             exactly (it binds JavaScript numbers): send it as text",
            i + 1,
            shown(statement.sql)
        )),
    }
}

/// SQL as errors and logs show it: on one line, its runs of white space
/// one space, and cut after 200 characters. The SQL is the app's constant,
/// never a value.
pub(crate) fn shown(sql: &str) -> String {
    let words: Vec<&str> = sql.split_whitespace().collect();
    let line = words.join(" ");
    match line.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// A D1 error as logs and an inbox's last error keep it: D1's own message
/// (SQLite's: the table, column or constraint), without the runtime's
/// stack, which `worker::Error`'s text carries.
pub(crate) fn said(error: &worker::Error) -> String {
    match error {
        worker::Error::D1(d1) => format!("D1: {}", d1.cause()),
        other => other.to_string(),
    }
}

/// The D1 database holding the ledger and the business tables.
pub const DB_BINDING: &str = "DB";

/// The D1 database of the ledger, the business tables and the outbox.
pub struct Db(D1Database);

impl Db {
    pub fn from_env(env: &Env) -> Result<Db> {
        Ok(Db(env.d1(DB_BINDING)?))
    }

    fn prepare(&self, statement: &Statement) -> Result<D1PreparedStatement> {
        bindable(statement)?;
        let params: Vec<JsValue> = statement.params.iter().map(Value::to_js).collect();
        self.0.prepare(statement.sql).bind(&params)
    }

    /// Runs the statements as one transaction: all commit, or none.
    pub async fn batch(&self, statements: &[Statement]) -> Result<()> {
        noted(self.probe(statements).await)
    }

    /// Runs the statements as [`Db::batch`] does, but a missing table is
    /// not logged: what probes for one says so itself (see `migrations`).
    pub async fn probe(&self, statements: &[Statement]) -> Result<()> {
        let prepared = statements
            .iter()
            .map(|s| self.prepare(s))
            .collect::<Result<Vec<_>>>()?;
        self.0.batch(prepared).await.map(drop)
    }

    /// Runs the statements as one transaction, as [`Db::batch`], and
    /// returns how many rows each changed.
    pub async fn batch_changes(&self, statements: &[Statement]) -> Result<Vec<usize>> {
        let prepared = statements
            .iter()
            .map(|s| self.prepare(s))
            .collect::<Result<Vec<_>>>()?;
        let mut changes = Vec::with_capacity(statements.len());
        for result in noted(self.0.batch(prepared).await)? {
            changes.push(result.meta()?.and_then(|meta| meta.changes).unwrap_or(0));
        }
        Ok(changes)
    }

    /// Runs one statement and returns how many rows it changed: how a
    /// conditional write learns whether its condition held.
    pub async fn run(&self, statement: &Statement) -> Result<usize> {
        Ok(noted(self.prepare(statement)?.run().await)?
            .meta()?
            .and_then(|meta| meta.changes)
            .unwrap_or(0))
    }

    #[cfg(any(feature = "admin", feature = "dashboard"))]
    /// The first row's `json` column, decoded: `None` when the statement
    /// returns no row.
    pub async fn row<T: DeserializeOwned>(&self, statement: &Statement) -> Result<Option<T>> {
        match self.json::<T>(statement).await? {
            Some(json) => json.decode().map(Some),
            None => Ok(None),
        }
    }

    #[cfg(any(feature = "admin", feature = "dashboard"))]
    /// The first row's `json` column as it is, to pass on or decode.
    pub async fn json<T>(&self, statement: &Statement) -> Result<Option<Json<T>>> {
        match self.text(statement, "json").await? {
            Some(text) => Ok(Some(Json::new(text)?)),
            None => Ok(None),
        }
    }

    /// The first row's text column `column`.
    pub async fn text(&self, statement: &Statement, column: &str) -> Result<Option<String>> {
        noted(self.prepare(statement)?.first::<String>(Some(column)).await)
    }

    /// Every row's `json` column (the statement's one column), decoded.
    pub async fn rows<T: DeserializeOwned>(&self, statement: &Statement) -> Result<Vec<T>> {
        let texts = self.texts(statement).await?;
        texts
            .iter()
            .map(|text| serde_json::from_str(text).map_err(Into::into))
            .collect()
    }

    /// Runs the statements as one transaction, as [`Db::batch`], and
    /// returns the text column `column` of the rows each returned, and how
    /// many rows D1 read for them all (what a scan costs, and is billed).
    pub async fn batch_texts_read(
        &self,
        statements: &[Statement],
        column: &str,
    ) -> Result<(Vec<Vec<String>>, usize)> {
        let prepared = statements
            .iter()
            .map(|s| self.prepare(s))
            .collect::<Result<Vec<_>>>()?;
        let (mut texts, mut read) = (Vec::new(), 0);
        for result in noted(self.0.batch(prepared).await)? {
            let rows: Vec<serde_json::Map<String, serde_json::Value>> = result.results()?;
            read += result.meta()?.and_then(|meta| meta.rows_read).unwrap_or(0);
            let column = rows
                .into_iter()
                .filter_map(|mut row| match row.remove(column) {
                    Some(serde_json::Value::String(text)) => Some(text),
                    _ => None,
                });
            texts.push(column.collect());
        }
        Ok((texts, read))
    }

    /// The one text column of every row (a `RETURNING key`).
    pub async fn texts(&self, statement: &Statement) -> Result<Vec<String>> {
        let rows = noted(self.prepare(statement)?.raw::<String>().await)?;
        Ok(rows.into_iter().flatten().collect())
    }
}

/// The fix for a D1 without the migrations' tables (plain `wrangler dev`
/// before they were applied): what the log line says.
const APPLY_MIGRATIONS: &str = "D1 has no such table: apply the migrations \
     (npx wrangler d1 migrations apply DB --local; deployed: --remote, which make deploy \
     runs; make dev does it first); the held events are then applied by their alarms";

thread_local! {
    static MISSING_TABLES_NOTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Passes `result` on; a "no such table" error is first logged, once per
/// isolate, with the command that fixes it.
fn noted<T>(result: Result<T>) -> Result<T> {
    if let Err(e) = &result {
        if missing_tables(&e.to_string()) && !MISSING_TABLES_NOTED.replace(true) {
            log::error(&Line::new("d1_tables_missing").detail(APPLY_MIGRATIONS));
        }
    }
    result
}

/// Whether D1's error says a table is missing.
fn missing_tables(error: &str) -> bool {
    error.contains("no such table")
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// JSON text standing for a `T`, as SQLite (or an inbox) built it: passed
/// on as is where it is only forwarded (the admin API), decoded where it is
/// read (the dashboard). Serializes as the text itself.
#[derive(Serialize)]
#[serde(transparent, bound = "")]
pub struct Json<T> {
    raw: Box<RawValue>,
    #[serde(skip)]
    of: PhantomData<T>,
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
impl<T> Json<T> {
    /// Checks the text is JSON (not that it is a `T`).
    pub fn new(text: String) -> Result<Self> {
        Ok(Json {
            raw: RawValue::from_string(text)?,
            of: PhantomData,
        })
    }
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
impl<T: DeserializeOwned> Json<T> {
    pub fn decode(&self) -> Result<T> {
        Ok(serde_json::from_str(self.raw.get())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_integer_a_javascript_number_would_round_is_refused_by_name() {
        let at = |n: i64| {
            Statement::new(
                "INSERT INTO t (a, b) VALUES (?1, ?2)",
                vec![1.into(), n.into()],
            )
        };
        assert_eq!(bindable(&at(MAX_SAFE_INTEGER)), Ok(()));
        assert_eq!(bindable(&at(-MAX_SAFE_INTEGER)), Ok(()));
        for n in [
            MAX_SAFE_INTEGER + 1,
            -MAX_SAFE_INTEGER - 1,
            i64::MIN,
            i64::MAX,
        ] {
            let error = bindable(&at(n)).unwrap_err();
            assert!(
                error.starts_with("parameter ?2 of `INSERT INTO t (a, b)"),
                "{error}"
            );
            assert!(!error.contains(&n.to_string()), "{error}");
        }
    }

    #[test]
    fn a_row_lock_is_a_select_whatever_comes_before_it() {
        let lock = |sql: &'static str| Statement::new(sql, vec![]).for_update().misplaced_lock();
        for sql in ["SELECT 1", " -- why\nselect\n1", "/* a */ (SELECT 1)"] {
            assert_eq!(lock(sql), None, "{sql}");
        }
        let refused = [
            "UPDATE t SET a = 1",
            "-- SELECT\nDELETE FROM t",
            "INSERT INTO t SELECT 1",
            "WITH a AS (SELECT 1) UPDATE t SET x = 1",
            "selection()",
        ];
        for sql in refused {
            assert!(lock(sql).is_some(), "{sql}");
        }
        assert_eq!(
            Statement::new("UPDATE t SET a = 1", vec![]).misplaced_lock(),
            None
        );
    }

    #[test]
    fn sql_is_shown_on_one_line_and_cut() {
        assert_eq!(shown("SELECT 1\n     FROM  t "), "SELECT 1 FROM t");
        let long = "x ".repeat(300);
        assert_eq!(shown(&long).chars().count(), 201);
    }

    #[test]
    fn a_missing_table_is_told_from_other_errors() {
        // As local D1 words it.
        assert!(missing_tables(
            "D1_ERROR: no such table: processed_events: SQLITE_ERROR"
        ));
        assert!(!missing_tables("D1_ERROR: UNIQUE constraint failed"));
        assert!(APPLY_MIGRATIONS.contains("wrangler d1 migrations apply DB --local"));
    }
}
