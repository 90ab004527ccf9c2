//! The inbox's tables: made on first use (an object that never held an
//! event has none, and reading it leaves it so), upgraded in place where an
//! older release made them, and forgotten with the event.

use std::cell::Cell;

use worker::{Result, SqlStorage, SqlStorageValue};

/// The one event this inbox holds. Its row is also the record of the first
/// delivery (`received_at`); the outcome of that delivery is `state`.
const EVENT_TABLE: &str = "CREATE TABLE event (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        source TEXT NOT NULL,
        provider TEXT NOT NULL,
        event_id TEXT NOT NULL,
        type TEXT NOT NULL,
        body TEXT NOT NULL,
        received_at INTEGER NOT NULL,
        state TEXT NOT NULL,
        effect_attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        done_at INTEGER,
        fault TEXT,
        reported INTEGER NOT NULL DEFAULT 0,
        replay_of TEXT,
        fence TEXT,
        sig_scheme TEXT,
        sig_secret INTEGER,
        signed_at INTEGER,
        forward TEXT
    )";

/// Columns added since the first release, for inboxes created before
/// them, each with the statement that adds it: `reported` says whether
/// `failed_events` lists the event (set when its failure is written,
/// cleared when a later success is), `replay_of` names the event whose
/// signed content this one repeated, `fence` is [`crate::event::VerifiedEvent::fence`],
/// `sig_*` and `signed_at` say how the first delivery was verified
/// (`providers::Verified`), and `forward` is where it is forwarded
/// ([`crate::event::VerifiedEvent::forward`]).
const EVENT_UPGRADES: [(&str, &str); 7] = [
    (
        "reported",
        "ALTER TABLE event ADD COLUMN reported INTEGER NOT NULL DEFAULT 0",
    ),
    ("replay_of", "ALTER TABLE event ADD COLUMN replay_of TEXT"),
    ("fence", "ALTER TABLE event ADD COLUMN fence TEXT"),
    ("sig_scheme", "ALTER TABLE event ADD COLUMN sig_scheme TEXT"),
    (
        "sig_secret",
        "ALTER TABLE event ADD COLUMN sig_secret INTEGER",
    ),
    (
        "signed_at",
        "ALTER TABLE event ADD COLUMN signed_at INTEGER",
    ),
    ("forward", "ALTER TABLE event ADD COLUMN forward TEXT"),
];

/// The same for the deliveries table.
const DELIVERIES_UPGRADES: [(&str, &str); 3] = [
    (
        "sig_scheme",
        "ALTER TABLE deliveries ADD COLUMN sig_scheme TEXT",
    ),
    (
        "sig_secret",
        "ALTER TABLE deliveries ADD COLUMN sig_secret INTEGER",
    ),
    (
        "signed_at",
        "ALTER TABLE deliveries ADD COLUMN signed_at INTEGER",
    ),
];

/// The later deliveries: when each arrived, and its payload by size and
/// SHA-256 only (one that differs from the first stands out). Created with
/// the first duplicate, so an event delivered once (the common case) costs
/// one table, not two. The newest row's `seq` counts every later delivery
/// ever logged: SQLite gives each insert one more than the largest, only
/// the oldest rows are deleted, and as an `INTEGER PRIMARY KEY` it is kept
/// as is by a VACUUM. (Inboxes made before the rename call it `copies`.)
pub(super) const DELIVERIES_TABLE: &str = "CREATE TABLE IF NOT EXISTS deliveries (
        seq INTEGER PRIMARY KEY,
        at INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        sig_scheme TEXT,
        sig_secret INTEGER,
        signed_at INTEGER
    )";

/// The columns a delivery log must have to be this release's (then only
/// [`DELIVERIES_UPGRADES`] may be missing); any other is an older release's.
const LOG_COLUMNS: [&str; 4] = ["seq", "at", "bytes", "sha256"];

/// The statement copying an older release's log (`table`, made by
/// `schema`) into `deliveries`: the columns it has, a stand-in for those it
/// lacks (the first release's had no `seq`, an earlier one no payload
/// hash); its `seq` kept where `keep_seq` (the new log was empty), so that
/// the count of deliveries stays.
fn copy_log(table: &str, schema: &str, keep_seq: bool) -> String {
    let column = |name: &'static str, stand_in: &'static str| {
        if has_column(schema, name) {
            name
        } else {
            stand_in
        }
    };
    let seq = keep_seq && has_column(schema, "seq");
    format!(
        "INSERT INTO deliveries ({}at, bytes, sha256) SELECT {}{}, {}, {} FROM {table} ORDER BY rowid",
        if seq { "seq, " } else { "" },
        if seq { "seq, " } else { "" },
        column("at", "0"),
        column("bytes", "0"),
        column("sha256", "'not kept'"),
    )
}

/// Whether a table's schema (its `CREATE TABLE` text, which SQLite extends
/// with each added column) names `column`: as a whole word, so that an old
/// `fence_body` is not taken for `fence`.
fn has_column(schema: &str, column: &str) -> bool {
    schema
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| word == column)
}

/// The inbox's tables.
#[derive(Clone, Copy)]
pub enum Table {
    /// The event, and its first delivery.
    Event,
    /// The later deliveries.
    Deliveries,
}

impl Table {
    fn create(self) -> &'static str {
        match self {
            Table::Event => EVENT_TABLE,
            Table::Deliveries => DELIVERIES_TABLE,
        }
    }
}

/// Which of the inbox's tables exist.
#[derive(Clone, Copy)]
struct Present {
    event: bool,
    deliveries: bool,
}

impl Present {
    fn has(self, table: Table) -> bool {
        match table {
            Table::Event => self.event,
            Table::Deliveries => self.deliveries,
        }
    }

    fn with(self, table: Table) -> Self {
        match table {
            Table::Event => Present {
                event: true,
                ..self
            },
            Table::Deliveries => Present {
                deliveries: true,
                ..self
            },
        }
    }
}

/// The inbox's SQLite, and which of its tables exist.
pub struct Tables {
    pub sql: SqlStorage,
    /// Read from `sqlite_master` once per instance, older tables upgraded
    /// on the way, then kept: only this instance makes or drops its tables,
    /// and each time it does, it says so here. `None`: not read yet, or
    /// unknown again (the storage was deleted, or a statement failed: it
    /// may have made a table, or met one that is gone).
    present: Cell<Option<Present>>,
}

impl Tables {
    pub fn new(sql: SqlStorage) -> Self {
        Tables {
            sql,
            present: Cell::new(None),
        }
    }

    /// Whether `table` exists, asked without creating it (an object that
    /// never held an event has none, and reading it leaves it so; the
    /// deliveries table is made with the first duplicate).
    pub fn has(&self, table: Table) -> Result<bool> {
        Ok(self.present()?.has(table))
    }

    /// After the object's storage was deleted: read again on next use.
    pub fn forget(&self) {
        self.present.set(None);
    }

    /// The first row `statement` (an insert into `table`) returns; the
    /// table is created first if it does not exist, in the same call into
    /// the runtime: one crossing instead of two on every new event. Should
    /// `statement` fail, the table may exist all the same: which tables do
    /// is read again.
    pub fn first_into(
        &self,
        table: Table,
        statement: &str,
        params: Vec<SqlStorageValue>,
    ) -> Result<Option<Vec<SqlStorageValue>>> {
        let present = self.present()?;
        if present.has(table) {
            return self.first(statement, params);
        }
        let row = self.first(&format!("{};\n{statement}", table.create()), params);
        self.present.set(row.is_ok().then_some(present.with(table)));
        row
    }

    /// Which tables exist, read once per instance. An event table made
    /// before its newer columns is given them; an older release's log — a
    /// `copies` table, or a `deliveries` without [`LOG_COLUMNS`] — is
    /// copied into a new one and dropped, in the same synchronous step as
    /// the read. A statement that fails does not undo those before it, so
    /// each step can be taken up again: an older `deliveries` is first
    /// renamed `deliveries_before`, which a later read finds and copies.
    fn present(&self) -> Result<Present> {
        if let Some(present) = self.present.get() {
            return Ok(present);
        }
        let mut tables = Vec::new();
        for row in self
            .sql
            .exec(
                "SELECT name, sql FROM sqlite_master
                 WHERE type = 'table'
                   AND name IN ('event', 'deliveries', 'copies', 'deliveries_before')",
                None,
            )?
            .raw()
        {
            if let [SqlStorageValue::String(name), SqlStorageValue::String(sql)] = row?.as_slice() {
                tables.push((name.clone(), sql.clone()));
            }
        }
        let (event, logs): (Vec<_>, Vec<_>) = tables.into_iter().partition(|(n, _)| n == "event");
        if let Some((_, sql)) = event.first() {
            self.upgrade(sql, &EVENT_UPGRADES)?;
        }
        let present = Present {
            event: !event.is_empty(),
            deliveries: self.upgrade_logs(logs)?,
        };
        self.present.set(Some(present));
        Ok(present)
    }

    /// Upgrades the delivery logs found (`(name, schema)`) to this
    /// release's `deliveries`; whether there is one.
    fn upgrade_logs(&self, tables: Vec<(String, String)>) -> Result<bool> {
        let current = |(name, sql): &&(String, String)| {
            name == "deliveries" && LOG_COLUMNS.iter().all(|c| has_column(sql, c))
        };
        let mut found = false;
        if let Some((_, sql)) = tables.iter().find(current) {
            self.upgrade(sql, &DELIVERIES_UPGRADES)?;
            found = true;
        }
        let older: Vec<&(String, String)> = tables.iter().filter(|t| !current(t)).collect();
        let keep_seq = !found;
        for (n, (name, schema)) in older.into_iter().enumerate() {
            let table = if name == "deliveries" {
                self.sql
                    .exec("ALTER TABLE deliveries RENAME TO deliveries_before", None)?;
                "deliveries_before"
            } else {
                name.as_str()
            };
            if !found {
                self.sql.exec(DELIVERIES_TABLE, None)?;
                found = true;
            }
            let copy = copy_log(table, schema, keep_seq && n == 0);
            self.sql
                .exec(&format!("{copy};\nDROP TABLE {table}"), None)?;
        }
        Ok(found)
    }

    /// Adds the columns a table's schema (`sql`) lacks.
    fn upgrade(&self, sql: &str, upgrades: &[(&str, &str)]) -> Result<()> {
        for (column, statement) in upgrades {
            if !has_column(sql, column) {
                self.sql.exec(statement, None)?;
            }
        }
        Ok(())
    }

    /// The first row a statement returns, if any.
    pub fn first(
        &self,
        query: &str,
        params: Vec<SqlStorageValue>,
    ) -> Result<Option<Vec<SqlStorageValue>>> {
        let params = (!params.is_empty()).then_some(params);
        let row = self
            .sql
            .exec(query, params)
            .and_then(|cursor| cursor.raw().next().transpose());
        if row.is_err() {
            // Perhaps a table that was thought to exist does not: which
            // tables do is read again next time, so that an error heals.
            self.forget();
        }
        row
    }

    /// The one text value a query returns, if it returns one.
    pub fn one_text(&self, query: &str, params: Vec<SqlStorageValue>) -> Result<Option<String>> {
        Ok(match self.first(query, params)?.as_deref() {
            Some([SqlStorageValue::String(text)]) => Some(text.clone()),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_is_found_by_its_whole_name() {
        let schema = "CREATE TABLE event (singleton INTEGER, fence_body INTEGER NOT NULL DEFAULT 0, signed_at INTEGER)";
        assert!(!has_column(schema, "fence"), "fence_body is another column");
        assert!(has_column(schema, "fence_body"));
        assert!(has_column(schema, "signed_at"));
        assert!(has_column(&format!("{schema}, fence TEXT"), "fence"));
        assert!(!has_column(schema, "sig_scheme"));
    }

    #[test]
    fn an_older_log_is_copied_with_what_it_has() {
        let first = "CREATE TABLE copies (at INTEGER NOT NULL, bytes INTEGER NOT NULL, sha256 TEXT NOT NULL)";
        assert_eq!(
            copy_log("copies", first, true),
            "INSERT INTO deliveries (at, bytes, sha256) SELECT at, bytes, sha256 FROM copies ORDER BY rowid"
        );
        let root = "CREATE TABLE deliveries (seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, outcome TEXT NOT NULL)";
        assert_eq!(
            copy_log("deliveries_before", root, true),
            "INSERT INTO deliveries (seq, at, bytes, sha256) SELECT seq, at, 0, 'not kept' FROM deliveries_before ORDER BY rowid"
        );
        assert!(!copy_log("deliveries_before", root, false).contains("seq"));
    }
}
