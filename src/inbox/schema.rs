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
        fence TEXT
    )";

/// Columns added since the first release, for inboxes created before them:
/// `reported` says whether `failed_events` lists the event (set when its
/// failure is written, cleared when a later success is), `replay_of` names
/// the event whose signed content this one repeated, `fence` is
/// [`VerifiedEvent::fence`].
const EVENT_UPGRADES: [&str; 3] = [
    "ALTER TABLE event ADD COLUMN reported INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE event ADD COLUMN replay_of TEXT",
    "ALTER TABLE event ADD COLUMN fence TEXT",
];

/// The later deliveries: when each arrived, and its payload by size and
/// SHA-256 only (one that differs from the first stands out). Created with
/// the first duplicate, so an event delivered once (the common case) costs
/// one table, not two. The newest row's `seq` counts every later delivery
/// ever logged: SQLite gives each insert one more than the largest, only
/// the oldest rows are deleted, and as an `INTEGER PRIMARY KEY` it is kept
/// as is by a VACUUM. (Inboxes made before the rename call it `copies`.)
const DELIVERIES_TABLE: &str = "CREATE TABLE IF NOT EXISTS deliveries (
        seq INTEGER PRIMARY KEY,
        at INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        sha256 TEXT NOT NULL
    )";

/// The inbox's SQLite, and whether this instance has made its tables.
pub struct Tables {
    pub sql: SqlStorage,
    /// Only caches: after the retention deadline deletes the tables, they
    /// are created anew.
    event_ready: Cell<bool>,
    deliveries_ready: Cell<bool>,
}

impl Tables {
    pub fn new(sql: SqlStorage) -> Self {
        Tables {
            sql,
            event_ready: Cell::new(false),
            deliveries_ready: Cell::new(false),
        }
    }

    /// Whether the event table exists (upgraded if it was made by an older
    /// release), asked without creating it.
    pub fn has_event_table(&self) -> Result<bool> {
        if self.event_ready.get() {
            return Ok(true);
        }
        let Some(existing) = self.event_schema()? else {
            return Ok(false);
        };
        self.prepare_event_table(Some(existing))?;
        Ok(true)
    }

    /// After the object's storage was deleted: the tables are gone.
    pub fn forget(&self) {
        self.event_ready.set(false);
        self.deliveries_ready.set(false);
    }

    /// Whether this object has an event table at all (its schema); asked
    /// without creating one, so that reading an empty object leaves it empty.
    fn event_schema(&self) -> Result<Option<String>> {
        self.one_text(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'event'",
            Vec::new(),
        )
    }

    /// Creates the event table, or upgrades one made before its newer
    /// columns. Once per instance.
    pub fn ensure_event_table(&self) -> Result<()> {
        if self.event_ready.get() {
            return Ok(());
        }
        let existing = self.event_schema()?;
        self.prepare_event_table(existing)
    }

    /// Creates the event table (`existing` is `None`) or upgrades the one
    /// whose schema is `existing`, and remembers it is ready.
    fn prepare_event_table(&self, existing: Option<String>) -> Result<()> {
        match existing {
            None => {
                self.sql.exec(EVENT_TABLE, None)?;
            }
            Some(sql) if !sql.contains("fence") => {
                for upgrade in EVENT_UPGRADES {
                    self.sql.exec(upgrade, None)?;
                }
            }
            Some(_) => {}
        }
        self.event_ready.set(true);
        Ok(())
    }

    /// Whether the deliveries table exists (created with the first
    /// duplicate), asked without creating it. A log kept under its old name
    /// (`copies`) is renamed, or — should both exist, after a rollback and a
    /// roll forward — added to the new one.
    pub fn has_deliveries_table(&self) -> Result<bool> {
        if self.deliveries_ready.get() {
            return Ok(true);
        }
        let mut names = Vec::new();
        for row in self
            .sql
            .exec(
                "SELECT name FROM sqlite_master
                 WHERE type = 'table' AND name IN ('deliveries', 'copies')",
                None,
            )?
            .raw()
        {
            if let [SqlStorageValue::String(name)] = row?.as_slice() {
                names.push(name.clone());
            }
        }
        let has = |name: &str| names.iter().any(|n| n == name);
        match (has("deliveries"), has("copies")) {
            (false, true) => {
                self.sql
                    .exec("ALTER TABLE copies RENAME TO deliveries", None)?;
            }
            (true, true) => {
                self.sql.exec(
                    "INSERT INTO deliveries (at, bytes, sha256)
                     SELECT at, bytes, sha256 FROM copies ORDER BY rowid",
                    None,
                )?;
                self.sql.exec("DROP TABLE copies", None)?;
            }
            _ => {}
        }
        let found = !names.is_empty();
        self.deliveries_ready.set(found);
        Ok(found)
    }

    pub fn ensure_deliveries_table(&self) -> Result<()> {
        if !self.has_deliveries_table()? {
            self.sql.exec(DELIVERIES_TABLE, None)?;
            self.deliveries_ready.set(true);
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
        self.sql.exec(query, params)?.raw().next().transpose()
    }

    /// The one text value a query returns, if it returns one.
    pub fn one_text(&self, query: &str, params: Vec<SqlStorageValue>) -> Result<Option<String>> {
        Ok(match self.first(query, params)?.as_deref() {
            Some([SqlStorageValue::String(text)]) => Some(text.clone()),
            _ => None,
        })
    }
}
