//! The Postgres store (feature `postgres`, `STORE = "postgres"`): an
//! event's ledger row, its effect's writes and its outbox rows commit in ONE
//! Postgres transaction on one connection through Hyperdrive (`BEGIN` …
//! `COMMIT`, never two API calls, which would be two transactions). The
//! engine's own tables stay in D1; what they need of the event follows the
//! commit by a hand-off (see `handoff`, and docs/postgres.md for why).
//!
//! One connection per unit of work, because a connection cannot serve
//! another request. It is polled inside the request and closed before the
//! reply (the local Hyperdrive proxy ends the runtime if a request ends
//! while Postgres is still sending), and every unit has a deadline: a
//! database that is down, restarting or refusing the password is an error
//! to answer, never a hang.

mod apply;
#[cfg(any(feature = "admin", feature = "dashboard"))]
mod backlog;
mod handoff;
mod pipeline;
mod placeholders;
mod relay;
mod scram;
mod sql;
mod startup;
mod tries;

use std::pin::pin;
use std::time::Duration;

use futures_util::future::{select, Either};
use futures_util::FutureExt;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{config::SslMode, Client, Config, Connection, NoTls};
use worker::{Delay, Env, Socket};

use crate::config::Store;
use crate::d1::{shown, Statement};
use crate::migrations::{self, Behind, Migration};
use pipeline::{Answers, Pipeline, Sent};
use startup::Started;

pub(crate) use apply::{apply, dismiss, dismissed, handled};
#[cfg(any(feature = "admin", feature = "dashboard"))]
pub(crate) use backlog::{backlog, retry as retry_stuck, Backlog};
pub(crate) use relay::run as relay;
#[cfg(feature = "testing")]
pub(crate) use sql::{params, typed_for, unsendable};
#[cfg(feature = "testing")]
pub(crate) use {apply::LEDGER_INSERT, placeholders::numbered, sql::text};
#[cfg(feature = "testing")]
pub(crate) use {handoff::listed as listed_rows, handoff::INSERT as INSERT_ROWS};

/// The Hyperdrive binding of the database (wrangler.toml's `[[hyperdrive]]`).
pub const HYPERDRIVE_BINDING: &str = "HYPERDRIVE";

/// How long one unit of work (connect, run) may take before it is given up
/// as unavailable; its close has `CLOSE` more.
const DEADLINE: Duration = Duration::from_millis(5_000);

/// Opens a transaction whose statements Postgres itself stops before the
/// deadline (a lock held elsewhere, a slow disk), and which it rolls back
/// should this side go quiet mid-way (a runtime killed between round
/// trips), so that an abandoned transaction never holds a ledger key. One
/// simple query, `BEGIN` first, so that nothing runs outside the
/// transaction; `SET LOCAL`, so that nothing outlives it on a pooled
/// connection. The first unit of an isolate also probes the engine's
/// migrations there (see `migrations`), in the same round trip.
const BEGIN: &str = "BEGIN; SET LOCAL statement_timeout = 4000; \
     SET LOCAL idle_in_transaction_session_timeout = 10000";

/// Sends [`BEGIN`] and the probes due, first in `pipeline`.
pub(crate) fn begin<'a>(pipeline: &mut Pipeline<'a>) -> Begun {
    let probes = migrations::unchecked(Store::Postgres);
    Begun {
        begun: pipeline.simple(BEGIN),
        probes: probes
            .iter()
            .map(|m| (m, pipeline.simple(m.probe)))
            .collect(),
    }
}

/// The answers [`begin`] awaits.
pub(crate) struct Begun {
    begun: Sent,
    probes: Vec<(&'static Migration, Sent)>,
}

impl Begun {
    /// Whether the transaction began, and the engine's migrations are
    /// there: a missing one is [`PgError::Behind`], naming it.
    pub(crate) fn check(self, answers: &mut Answers) -> Result<(), PgError> {
        answers.take(self.begun)?;
        let checked = !self.probes.is_empty();
        for (migration, probe) in self.probes {
            let Err(e) = answers.take(probe) else {
                continue;
            };
            let missing = e
                .code()
                .is_some_and(|c| migrations::postgres_missing(c.code()));
            return Err(match PgError::from(e) {
                PgError::Refused(why) if missing => {
                    PgError::Behind(migrations::behind(migration, why))
                }
                error => error,
            });
        }
        if checked {
            migrations::passed(Store::Postgres);
        }
        Ok(())
    }
}

/// Why a unit of work did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PgError {
    /// Postgres could not be reached or would not serve: down, restarting,
    /// refusing the password, out of connections. The sender is told to
    /// come back (503).
    Unavailable(String),
    /// Postgres did not answer before the deadline, or stopped a statement
    /// at its timeout (a lock held elsewhere). Also a 503.
    Slow(String),
    /// Postgres refused a statement (an effect's SQL, a constraint). The
    /// transaction rolled back.
    Refused(String),
    /// Postgres lacks one of the engine's migrations: the event waits for
    /// it, and its sender is told (500 `misconfigured`).
    Behind(Behind),
}

impl PgError {
    pub(crate) fn message(&self) -> String {
        match self {
            PgError::Unavailable(why) => format!("postgres: {why}"),
            PgError::Slow(why) => format!("postgres too slow: {why}"),
            PgError::Refused(why) => format!("postgres refused: {why}"),
            PgError::Behind(behind) => behind.message(),
        }
    }
}

impl PgError {
    /// The error, said to have come from `statement` (`which` says where it
    /// stood): a refusal names the statement's SQL, where the app's bug is.
    pub(crate) fn at(self, which: &str, statement: &Statement) -> PgError {
        match self {
            PgError::Refused(why) => {
                PgError::Refused(format!("{why}, in {which}: {}", shown(statement.sql)))
            }
            other => other,
        }
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(error: tokio_postgres::Error) -> Self {
        let Some(db) = error.as_db_error() else {
            // The client's own: the connection (refused, reset, closed), or
            // what this side could not encode or decode (an app's bug).
            return if lost_connection(&error) {
                PgError::Unavailable(error.to_string())
            } else {
                PgError::Refused(error.to_string())
            };
        };
        let code = db.code().code();
        let why = described(db);
        if code == "57014" {
            PgError::Slow(why)
        } else if is_unavailable(code, db.message()) {
            PgError::Unavailable(why)
        } else {
            PgError::Refused(why)
        }
    }
}

impl From<worker::Error> for PgError {
    fn from(error: worker::Error) -> Self {
        PgError::Unavailable(error.to_string())
    }
}

/// SQLSTATE classes of a server that will not serve now, whatever the
/// statement: connection (08), authorization (28), resources (53), an
/// operator's or a crash's shutdown (57P), a missing database (3D000).
/// But the 08P01 Postgres raises for a statement bound with fewer values
/// than its placeholders: an app's bug, which no wait mends (a pooler's
/// own 08P01, a lost server, is an outage).
fn is_unavailable(code: &str, message: &str) -> bool {
    let classes = ["08", "28", "53", "57P"];
    let app_bug = code == "08P01" && message.starts_with("bind message supplies");
    (classes.iter().any(|class| code.starts_with(class)) && !app_bug) || code == "3D000"
}

/// Whether a client-side error is the connection's: tokio-postgres says
/// which by its first words (its error kinds are private). Anything else
/// it raised (a value it could not encode, a row it could not decode) is
/// the statement's.
fn lost_connection(error: &tokio_postgres::Error) -> bool {
    const CONNECTION: [&str; 10] = [
        "error communicating with the server",
        "connection closed",
        "error connecting to server",
        "timeout waiting for server",
        "error performing TLS handshake",
        "authentication error",
        "unexpected message from server",
        "error parsing response from server",
        // Hyperdrive's connection string: the platform's, not the app's.
        "invalid connection string",
        "invalid configuration",
    ];
    let said = error.to_string();
    error.is_closed() || CONNECTION.iter().any(|kind| said.starts_with(kind))
}

/// A server error as logs and the inbox keep it: its SQLSTATE, its message,
/// and the constraint, table, column or type it names. Never its detail,
/// which quotes the row. A data exception (class 22) quotes the value it
/// refused, and a `RAISE` (class P0) says whatever its author wrote: theirs
/// is a fixed name for their SQLSTATE instead of their message.
pub(crate) fn described(db: &tokio_postgres::error::DbError) -> String {
    let code = db.code().code();
    // A RAISE … USING ERRCODE takes any code: its message is the author's.
    let raised = matches!(db.routine(), Some("exec_stmt_raise" | "exec_stmt_assert"));
    let message = match condition(code) {
        _ if raised => "raised by PL/pgSQL (its message is left out)",
        Some(name) => name,
        None => db.message(),
    };
    let named = [
        ("constraint", db.constraint()),
        ("table", db.table()),
        ("column", db.column()),
        ("type", db.datatype()),
    ];
    // A RAISE may set these to any text too.
    let named: Vec<String> = named
        .iter()
        .filter(|_| !raised)
        .filter_map(|(what, name)| Some(format!("{what} {}", (*name)?)))
        .collect();
    match named.is_empty() {
        true => format!("{code} {message}"),
        false => format!("{code} {message} ({})", named.join(", ")),
    }
}

/// The condition name of a SQLSTATE whose message may carry a value
/// (Postgres's appendix A); `None` for the others, whose message is kept.
fn condition(code: &str) -> Option<&'static str> {
    const NAMES: [(&str, &str); 19] = [
        ("22001", "string_data_right_truncation"),
        ("22003", "numeric_value_out_of_range"),
        ("22004", "null_value_not_allowed"),
        ("22007", "invalid_datetime_format"),
        ("22008", "datetime_field_overflow"),
        ("22012", "division_by_zero"),
        ("22018", "invalid_character_value_for_cast"),
        ("22021", "character_not_in_repertoire"),
        ("22023", "invalid_parameter_value"),
        ("22026", "string_data_length_mismatch"),
        ("22030", "duplicate_json_object_key_value"),
        ("22032", "invalid_json_text"),
        ("22P02", "invalid_text_representation"),
        ("22P05", "untranslatable_character"),
        ("P0000", "plpgsql_error"),
        ("P0001", "raise_exception"),
        ("P0002", "no_data_found"),
        ("P0003", "too_many_rows"),
        ("P0004", "assert_failure"),
    ];
    let named = NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, name)| *name);
    match (named, code.get(..2)) {
        (Some(name), _) => Some(name),
        (None, Some("22")) => Some("data_exception"),
        (None, Some("P0")) => Some("plpgsql_error"),
        _ => None,
    }
}

/// Runs `work` on a new connection to the database, polling the connection
/// alongside it, both before `DEADLINE`; then closes the connection, for
/// at most `CLOSE`, whatever the close comes to: once `work` has its
/// answer (a `COMMIT` acknowledged), nothing after it can change it.
pub(crate) async fn with_client<T>(
    env: &Env,
    work: impl AsyncFnOnce(&Client) -> Result<T, PgError>,
) -> Result<T, PgError> {
    let mut deadline = pin!(Delay::from(DEADLINE));
    let slow = || {
        let ms = DEADLINE.as_millis();
        PgError::Slow(format!("no answer within {ms} ms"))
    };
    let (client, connection) = match select(pin!(connect(env)), deadline.as_mut()).await {
        Either::Left((connected, _)) => connected?,
        Either::Right(_) => return Err(slow()),
    };
    let mut connection = pin!(connection);
    let result = {
        let work = pin!(work(&client));
        match select(select(work, connection.as_mut()), deadline).await {
            Either::Left((Either::Left((result, _)), _)) => result,
            // The connection ended, maybe just after it passed on the last
            // answers (a `COMMIT`'s among them): what the work makes of
            // those, at once, stands.
            Either::Left((Either::Right((ended, work)), _)) => {
                if let Some(Ok(answered)) = work.now_or_never() {
                    return Ok(answered);
                }
                return Err(PgError::Unavailable(match ended {
                    Ok(()) => "the server closed the connection".into(),
                    Err(e) => e.to_string(),
                }));
            }
            Either::Right(_) => Err(slow()),
        }
    };
    // Closed here, within the request: the client's drop sends Terminate,
    // and the connection ends once the server has it.
    drop(client);
    let _closed = select(connection, pin!(Delay::from(CLOSE))).await;
    result
}

/// How long a connection is given to close once its work is done.
const CLOSE: Duration = Duration::from_millis(1_000);

/// A new connection through Hyperdrive, started and authenticated.
async fn connect(env: &Env) -> Result<(Client, Connection<Started<Socket>, NoTlsStream>), PgError> {
    let hyperdrive = env.hyperdrive(HYPERDRIVE_BINDING)?;
    let mut config: Config = hyperdrive.connection_string().parse()?;
    // Hyperdrive's socket is the runtime's own; it speaks TLS to the origin.
    config.ssl_mode(SslMode::Disable);
    let started = startup::start(hyperdrive.connect()?, &config).await?;
    Ok(config.connect_raw(started, NoTls).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_will_not_serve_is_unavailable_a_refused_statement_is_not() {
        for code in [
            "08006", "28P01", "53300", "57P01", "57P03", "3D000", "08P01",
        ] {
            assert!(
                is_unavailable(code, "server closed the connection"),
                "{code}"
            );
        }
        for code in ["23505", "42P01", "22P02", "40001", "57014"] {
            assert!(!is_unavailable(code, ""), "{code}");
        }
        let bind = "bind message supplies 1 parameters, but prepared statement \"\" requires 2";
        assert!(!is_unavailable("08P01", bind));
    }

    #[test]
    fn a_message_that_may_carry_a_value_is_a_fixed_name() {
        assert_eq!(condition("22P02"), Some("invalid_text_representation"));
        assert_eq!(condition("22999"), Some("data_exception"));
        assert_eq!(condition("P0001"), Some("raise_exception"));
        assert_eq!(condition("23505"), None);
        assert_eq!(condition("42703"), None);
    }
}
