//! The engine's migrations, as a store must have applied them. A store that
//! is behind (a migration not applied, as after `cargo update` moved the
//! engine without its migrations) is told by a probe that fails without it,
//! run once per isolate before the first unit of work: the event then waits
//! for the migration, with one log line and a `misconfigured` reply that
//! name it, rather than a missing-column error at every try.
//!
//! Released migrations never change: a database that applied one never
//! applies it again. The tests pin each file's bytes by hash.

use std::cell::Cell;

use crate::config::Store;
use crate::log::{self, Line};

/// One migration of the engine's.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Migration {
    /// Its name after the number: a copy numbers the engine's migrations
    /// after its own (`migrations/0012_engine_schema.sql`), by this name.
    pub name: &'static str,
    /// Its folder, in the engine and in a copy.
    pub dir: &'static str,
    /// A statement that fails without it, and reads no row.
    pub probe: &'static str,
}

/// D1's: the engine's own tables.
pub(crate) const D1: &[Migration] = &[Migration {
    name: "engine_schema",
    dir: "migrations",
    probe: "SELECT 1 FROM processed_events, outbox, failed_events, source_counters, \
            delivery_trend, forwards, destinations LIMIT 0",
}];

/// Postgres's (feature `postgres`): the ledger and the hand-off rows.
pub(crate) const POSTGRES: &[Migration] = &[
    Migration {
        name: "engine_schema",
        dir: "migrations-postgres",
        probe: "SELECT 1 FROM processed_events, webhook_outbox LIMIT 0",
    },
    Migration {
        name: "engine_handoff_tries",
        dir: "migrations-postgres",
        probe: "SELECT tries FROM webhook_outbox LIMIT 0",
    },
    Migration {
        name: "engine_handoff_due",
        dir: "migrations-postgres",
        probe: "SELECT 'webhook_outbox_due'::regclass LIMIT 0",
    },
];

/// Why a unit of work did not run: the store lacks `migration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Behind {
    pub migration: &'static Migration,
    /// The store's own words.
    pub why: String,
}

/// How an inbox keeps a store-behind failure (its last error) begins.
const BEHIND: &str = "store behind: missing migration ";

impl Behind {
    /// As the inbox keeps it: [`missing_of`] reads the name back.
    pub(crate) fn message(&self) -> String {
        let Migration { name, dir, .. } = self.migration;
        format!("{BEHIND}{name} ({dir}/NNNN_{name}.sql): {}", self.why)
    }
}

/// The migration an inbox's last error says is missing.
pub(crate) fn missing_of(last_error: &str) -> Option<&str> {
    let rest = last_error.strip_prefix(BEHIND)?;
    rest.split(' ').next()
}

thread_local! {
    /// Whether each store passed its probes in this isolate: D1, Postgres.
    static PASSED: [Cell<bool>; 2] = const { [Cell::new(false), Cell::new(false)] };
    /// Whether this isolate logged `store_behind` already.
    static NOTED: Cell<bool> = const { Cell::new(false) };
}

fn slot(store: Store) -> usize {
    match store {
        Store::D1 => 0,
        Store::Postgres => 1,
    }
}

/// The migrations to probe in `store` before its next unit of work: all of
/// them until they have passed once in this isolate, then none.
pub(crate) fn unchecked(store: Store) -> &'static [Migration] {
    if PASSED.with(|passed| passed[slot(store)].get()) {
        return &[];
    }
    match store {
        Store::D1 => D1,
        Store::Postgres => POSTGRES,
    }
}

/// Marks `store`'s probes passed for the rest of the isolate.
pub(crate) fn passed(store: Store) {
    PASSED.with(|passed| passed[slot(store)].set(true));
}

/// `migration` is missing: logged once per isolate (`store_behind`), with
/// what applies it.
pub(crate) fn behind(migration: &'static Migration, why: String) -> Behind {
    let behind = Behind { migration, why };
    if !NOTED.replace(true) {
        let fix = match migration.dir {
            "migrations" => "make deploy applies it (wrangler d1 migrations apply DB --remote; make dev locally)",
            _ => "make deploy applies it (node scripts/deploy-postgres.mjs migrate; make dev locally)",
        };
        let line = Line::new("store_behind").detail(format!("{}; {fix}", behind.message()));
        log::error(&line);
    }
    behind
}

/// Whether D1's error says a table or a column is missing.
pub(crate) fn d1_missing(error: &str) -> bool {
    error.contains("no such table") || error.contains("no such column")
}

/// Whether Postgres's SQLSTATE says a table or a column is missing.
#[cfg_attr(not(any(feature = "postgres", test)), expect(dead_code))]
pub(crate) fn postgres_missing(code: &str) -> bool {
    code == "42P01" || code == "42703"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::sha256_hex;

    /// Every migration file the engine ships, and its bytes' SHA-256 as
    /// released. A released migration never changes: a database that
    /// applied it never runs it again. Add a line for a new file; never
    /// change one.
    const RELEASED: &[(&str, &str)] = &[
        (
            "migrations/0001_engine_schema.sql",
            "6c473078f9294a698e7d521c5681ae7968603aec682eac107581cc5e02f6f9fb",
        ),
        (
            "migrations-postgres/0001_engine_schema.sql",
            "053e94e66c0d33dec48bd13d8876f86c2436367fff0f7a1a88dec808bd6516ad",
        ),
        (
            "migrations-postgres/0002_engine_handoff_tries.sql",
            "cd4564ff94d2bba56ff3748f4216f9bdb6560cdbafd1a3fefde2a838310be410",
        ),
        (
            "migrations-postgres/0003_engine_handoff_due.sql",
            "5496f92d91c2d96160098f00dedac23eee1a0a31efb794a928ad2932772427fb",
        ),
    ];

    fn shipped() -> Vec<String> {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut files = Vec::new();
        for dir in ["migrations", "migrations-postgres"] {
            for entry in std::fs::read_dir(format!("{root}/{dir}")).unwrap() {
                files.push(format!(
                    "{dir}/{}",
                    entry.unwrap().file_name().to_string_lossy()
                ));
            }
        }
        files.sort();
        files
    }

    #[test]
    fn a_released_migration_never_changes_by_a_byte() {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut listed: Vec<String> = RELEASED.iter().map(|(path, _)| path.to_string()).collect();
        listed.sort();
        assert_eq!(
            shipped(),
            listed,
            "every migration file has its line in RELEASED"
        );
        for (path, sha256) in RELEASED {
            let bytes = std::fs::read(format!("{root}/{path}")).unwrap();
            assert_eq!(
                sha256_hex(&bytes),
                *sha256,
                "{path} changed after its release: ship the change as a new migration"
            );
        }
    }

    #[test]
    fn every_migration_has_a_probe_and_every_probe_a_file() {
        for migration in D1.iter().chain(POSTGRES) {
            let suffix = format!("_{}.sql", migration.name);
            assert!(
                shipped()
                    .iter()
                    .any(|f| f.starts_with(&format!("{}/", migration.dir)) && f.ends_with(&suffix)),
                "{} has no file in {}",
                migration.name,
                migration.dir
            );
            assert!(migration.probe.ends_with("LIMIT 0"), "{}", migration.probe);
        }
        assert_eq!(
            shipped().len(),
            D1.len() + POSTGRES.len(),
            "one probe per file"
        );
    }

    #[test]
    fn a_behind_store_is_told_from_other_failures() {
        assert!(d1_missing(
            "D1_ERROR: no such table: processed_events: SQLITE_ERROR"
        ));
        assert!(d1_missing("D1_ERROR: no such column: tries: SQLITE_ERROR"));
        assert!(!d1_missing("D1_ERROR: UNIQUE constraint failed"));
        assert!(postgres_missing("42703") && postgres_missing("42P01"));
        assert!(!postgres_missing("23505"));
        let behind = Behind {
            migration: &POSTGRES[1],
            why: "42703 column \"tries\" does not exist".into(),
        };
        assert_eq!(missing_of(&behind.message()), Some("engine_handoff_tries"));
        assert_eq!(missing_of("postgres refused: 23505"), None);
    }
}
