//! The `AdminGuard` object: one row, a count or a session's end, and an
//! alarm that forgets it when it is over.

use std::time::Duration;

use worker::wasm_bindgen;
use worker::{
    durable_object, Delay, DurableObject, Env, Method, Request, Response, Result, SqlStorage,
    SqlStorageValue, State,
};

use super::policy::{decide, Verdict, GLOBAL_FAILURES, WINDOW_MS};
use super::{ATTEMPT, COUNT, PRESSED, REVOKE, REVOKED};
use crate::clock::now_ms;
use crate::fault::Fault;
use crate::settings::Settings;

/// An object's one row: a client's or everyone's failures in `window`,
/// a client's news of pressure, or a signed-out session's end.
const TABLE: &str = "CREATE TABLE IF NOT EXISTS guard (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        window INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        pressed_until INTEGER NOT NULL DEFAULT 0,
        revoked_until INTEGER NOT NULL DEFAULT 0
    )";

/// The Durable Object that counts wrong admin tokens (per client, and
/// overall) and remembers signed-out sessions: export it from the app
/// (`pub use webhook_engine::objects::*;`) as `ADMIN_GUARD` binds it.
#[durable_object]
pub struct AdminGuard {
    state: State,
    sql: SqlStorage,
    /// Whether a request's `fault` is honoured (`TEST_FAULTS`).
    test_faults: bool,
}

impl DurableObject for AdminGuard {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        let test_faults = Settings::of(&env).test_faults;
        AdminGuard {
            state,
            sql,
            test_faults,
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let url = req.inner().url();
        let query = url.split_once('?').map_or("", |(_, q)| q).to_string();
        let param = |name: &str| {
            form_urlencoded::parse(query.as_bytes())
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| v.parse::<i64>().ok())
        };
        match self.fault(&query) {
            Some(Fault::GuardFails) => return Response::error("injected fault", 500),
            Some(Fault::GuardHangs) => Delay::from(Duration::from_secs(30)).await,
            _ => {}
        }
        let now = now_ms();
        // A time that must be given, and in the future.
        let until = || param("until").filter(|until| *until > now);
        let window = now.div_euclid(WINDOW_MS);
        let window_end = (window + 1) * WINDOW_MS;
        let row = self.row(window)?;
        // What to write, if anything: an object that only answers reads
        // stores nothing, so a session never signed out costs no storage.
        let (answer, write) = match (req.method(), req.path().as_str()) {
            (Method::Post, ATTEMPT) => {
                let pressed = row.pressed_until > now;
                let valid = param("valid") == Some(1);
                let verdict = decide(row.failures, pressed, valid, window_end - now);
                let write = match verdict {
                    Verdict::Wrong => Some(("failures", row.failures + 1, window_end)),
                    // A success clears the client's own count (a typo or two).
                    Verdict::Allowed if row.failures > 0 => Some(("failures", 0, window_end)),
                    _ => None,
                };
                (verdict.to_text(), write)
            }
            (Method::Post, COUNT) => {
                let failures = row.failures + 1;
                let until = if failures >= GLOBAL_FAILURES {
                    window_end
                } else {
                    0
                };
                (until.to_string(), Some(("failures", failures, window_end)))
            }
            (Method::Post, PRESSED) => match until() {
                Some(until) => (String::new(), Some(("pressed_until", until, until))),
                None => return Response::error("no until", 400),
            },
            (Method::Post, REVOKE) => match until() {
                Some(until) => (String::new(), Some(("revoked_until", until, until))),
                None => return Response::error("no until", 400),
            },
            (Method::Get, REVOKED) => {
                let revoked = row.revoked_until > now;
                let answer = if revoked { "revoked" } else { "valid" };
                (answer.to_string(), None)
            }
            _ => return Response::error("not found", 404),
        };
        if let Some((column, value, forget_at)) = write {
            self.set(column, value, window)?;
            // Should arming fail, the next write arms it; a session's row
            // then outlives its alarm, harmlessly: it only says "revoked".
            self.forget_at(forget_at.max(window_end)).await?;
        }
        Response::ok(answer)
    }

    /// The object has outlived what it counts: it forgets everything.
    async fn alarm(&self) -> Result<Response> {
        let now = now_ms();
        let window = now.div_euclid(WINDOW_MS);
        let row = self.row(window)?;
        // Failures of the window now running count until it ends.
        let counting_until = if row.failures > 0 {
            (window + 1) * WINDOW_MS
        } else {
            0
        };
        let keep_until = row.pressed_until.max(row.revoked_until).max(counting_until);
        if keep_until > now {
            self.state.storage().set_alarm(keep_until - now).await?;
            return Response::ok("kept");
        }
        self.state.storage().delete_all().await?;
        Response::ok("forgotten")
    }
}

/// An object's row as read in `window`: failures of an older window count
/// as none; an object with no row reads as all zeros.
#[derive(Default)]
struct Row {
    failures: i64,
    pressed_until: i64,
    revoked_until: i64,
}

impl AdminGuard {
    /// The fault a request names (tests only).
    fn fault(&self, query: &str) -> Option<Fault> {
        if !self.test_faults {
            return None;
        }
        let (_, name) = form_urlencoded::parse(query.as_bytes()).find(|(n, _)| n == "fault")?;
        Fault::parse(&name)
    }

    fn row(&self, window: i64) -> Result<Row> {
        let exists = self
            .sql
            .exec(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'guard'",
                None,
            )?
            .raw()
            .next()
            .is_some();
        let found = if exists {
            self.sql
                .exec(
                    "SELECT window, failures, pressed_until, revoked_until FROM guard",
                    None,
                )?
                .raw()
                .next()
                .transpose()?
        } else {
            None
        };
        let int = |row: &[SqlStorageValue], i: usize| match row.get(i) {
            Some(SqlStorageValue::Integer(n)) => *n,
            _ => 0,
        };
        Ok(match found {
            Some(row) => Row {
                failures: if int(&row, 0) == window {
                    int(&row, 1)
                } else {
                    0
                },
                pressed_until: int(&row, 2),
                revoked_until: int(&row, 3),
            },
            None => Row::default(),
        })
    }

    /// Sets one column (a fixed name, never input) of the row, in `window`:
    /// a count of an older window is replaced.
    fn set(&self, column: &'static str, value: i64, window: i64) -> Result<()> {
        let reset = if column == "failures" {
            ""
        } else {
            ", failures = CASE WHEN window = ?2 THEN failures ELSE 0 END"
        };
        self.sql.exec(
            &format!(
                "{TABLE};\nINSERT INTO guard (singleton, window, {column}) VALUES (1, ?2, ?1) \
                 ON CONFLICT (singleton) DO UPDATE SET {column} = ?1{reset}, window = ?2"
            ),
            Some(vec![value.into(), window.into()]),
        )?;
        Ok(())
    }

    /// Makes sure the object wakes by `at` to forget what is over.
    async fn forget_at(&self, at: i64) -> Result<()> {
        let storage = self.state.storage();
        match storage.get_alarm().await? {
            Some(set) if set >= at => Ok(()),
            _ => storage.set_alarm(at - now_ms()).await,
        }
    }
}
