//! The tables an older release left, made only under a test fault
//! (`Fault::OlderTables`, `Fault::InterruptedUpgrade`) so that the
//! end-to-end tests can watch this release upgrade them in place. Kept
//! literal, apart from the live schema: they must not follow its changes.

use worker::{Result, SqlStorageValue};

use super::schema::{Tables, DELIVERIES_TABLE};

/// The first release's event table, without any column added since, for
/// the end-to-end tests of the upgrade (made only under a test fault,
/// `Fault::OlderTables` or `Fault::InterruptedUpgrade`), holding the event.
const OLDER_EVENT_TABLE: &str = "CREATE TABLE event (
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
        fault TEXT
    )";

/// A delivery log as the release before this one left it (`Fault::OlderTables`):
/// the first release's `copies` renamed to `deliveries`, without `seq`,
/// holding one logged copy.
const OLDER_LOG: [&str; 2] = [
    "CREATE TABLE deliveries (at INTEGER NOT NULL, bytes INTEGER NOT NULL, sha256 TEXT NOT NULL)",
    "INSERT INTO deliveries (at, bytes, sha256) VALUES (1, 2, 'logged by an older release')",
];

/// What an upgrade of that log leaves when it stops after making the new
/// log (`Fault::InterruptedUpgrade`): this release's `deliveries`, empty,
/// and the older log, renamed, not yet copied. The event table stays the
/// first release's, though such an upgrade would already have added its
/// columns: one test covers both upgrades.
const INTERRUPTED_LOG: [&str; 3] = [
    DELIVERIES_TABLE,
    "CREATE TABLE deliveries_before (at INTEGER NOT NULL, bytes INTEGER NOT NULL, sha256 TEXT NOT NULL)",
    "INSERT INTO deliveries_before (at, bytes, sha256) VALUES (1, 2, 'left by an interrupted upgrade')",
];

impl Tables {
    /// The tables an older release left (see [`OLDER_EVENT_TABLE`]), with
    /// the delivery log of [`OLDER_LOG`], or of [`INTERRUPTED_LOG`] when
    /// `interrupted`; `event_row` inserts the event, done.
    pub fn make_older_tables(
        &self,
        event_row: Vec<SqlStorageValue>,
        interrupted: bool,
    ) -> Result<()> {
        self.forget();
        let log: &[&str] = if interrupted {
            &INTERRUPTED_LOG
        } else {
            &OLDER_LOG
        };
        for statement in std::iter::once(&OLDER_EVENT_TABLE).chain(log) {
            self.sql.exec(statement, None)?;
        }
        self.sql.exec(
            "INSERT INTO event (singleton, source, provider, event_id, type, body, received_at, state)
             VALUES (1, ?, ?, ?, ?, ?, ?, 'done')",
            event_row,
        )?;
        self.forget();
        Ok(())
    }
}
