//! The inbox's rows and the statements the object runs on them (its tables
//! are made in `schema.rs`). All synchronous (Durable Object SQLite): no
//! other request runs between two of them, so a read and the write that
//! depends on it cannot be interleaved.

use worker::{Result, SqlStorage, SqlStorageValue};

use super::deliveries::{self, integer, verified, verified_columns};
pub use super::deliveries::{DeliveryKind, LoggedDelivery, DELIVERIES_KEPT};
use super::schema::{Table, Tables};
use super::state::{EventState, Held};
use crate::event::{self, VerifiedEvent};
use crate::fault::Fault;
use crate::providers::Verified;

/// The stored event, read column by column: never re-encoded through JSON,
/// so a body at the size cap loads whatever bytes it holds.
const LOAD_EVENT: &str = "SELECT source, provider, event_id, type, body, received_at, state,
        effect_attempts, fault, last_error, done_at, reported, replay_of, fence,
        sig_scheme, sig_secret, signed_at, forward
    FROM event";

/// The held event and its progress.
pub struct EventRow {
    pub event: VerifiedEvent,
    pub state: EventState,
    pub effect_attempts: i64,
    pub fault: Option<Fault>,
    pub last_error: Option<String>,
    pub done_at: Option<i64>,
    pub reported: bool,
    pub replay_of: Option<String>,
    /// How the first delivery was verified.
    pub verified: Option<Verified>,
}

impl EventRow {
    fn decode(row: &[SqlStorageValue]) -> Result<Self> {
        let text = |i: usize| match row.get(i) {
            Some(SqlStorageValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        let int = |i: usize| row.get(i).and_then(integer);
        let required = |i: usize| text(i).ok_or("inbox row: missing text column");
        let body = required(4)?;
        Ok(EventRow {
            event: VerifiedEvent {
                source: required(0)?,
                provider: required(1)?,
                id: required(2)?,
                kind: required(3)?,
                fence: text(13),
                body,
                received_at: int(5).unwrap_or_default(),
                forward: text(17),
            },
            state: EventState::from_name(&required(6)?).ok_or("inbox row: unknown state")?,
            effect_attempts: int(7).unwrap_or_default(),
            fault: text(8).as_deref().and_then(Fault::parse),
            last_error: text(9),
            done_at: int(10),
            reported: int(11).unwrap_or_default() != 0,
            replay_of: text(12),
            verified: verified(row.get(14..17).unwrap_or_default()),
        })
    }

    /// What the state machine needs to know of it.
    pub fn held(&self) -> Held {
        Held {
            state: self.state,
            reported: self.reported,
            received_at: self.event.received_at,
            done_at: self.done_at,
        }
    }

    /// The fault still in force for the next attempt.
    pub fn pending_fault(&self) -> Option<Fault> {
        self.fault.filter(|f| f.applies(self.effect_attempts))
    }
}

/// What the claim found.
pub enum Claim {
    /// This delivery is the first: the event row was inserted.
    First,
    /// The inbox already held the event, in this state.
    Held(EventState),
}

/// The statements the inbox runs, on its tables (`schema::Tables`).
pub struct Store {
    tables: Tables,
}

impl Store {
    pub fn new(sql: SqlStorage) -> Self {
        Store {
            tables: Tables::new(sql),
        }
    }

    /// The held event, if any, without creating tables in an object that
    /// never held one (or has forgotten it).
    pub fn held(&self) -> Result<Option<EventRow>> {
        if !self.tables.has(Table::Event)? {
            return Ok(None);
        }
        self.load()
    }

    /// The held event; the table must exist.
    pub fn load(&self) -> Result<Option<EventRow>> {
        let row = self.tables.first(LOAD_EVENT, Vec::new())?;
        row.map(|row| EventRow::decode(&row)).transpose()
    }

    /// The held event's state as stored (its text, which an older or newer
    /// release may have written), or `None` when this object holds no
    /// event; asked without creating a table, so that an event refused
    /// before its claim leaves the object empty.
    pub fn stored_state(&self) -> Result<Option<String>> {
        if !self.tables.has(Table::Event)? {
            return Ok(None);
        }
        self.tables.one_text("SELECT state FROM event", Vec::new())
    }

    /// The event's state as stored now (after an `.await`, memory may be
    /// stale), where this build can read it.
    pub fn state(&self) -> Result<Option<EventState>> {
        Ok(self
            .stored_state()?
            .as_deref()
            .and_then(EventState::from_name))
    }

    /// The event's progress as stored now, without its body: what the
    /// state machine needs after an attempt, on the reply's path.
    pub fn progress(&self) -> Result<Option<Held>> {
        let row = self.tables.first(
            "SELECT state, reported, received_at, done_at FROM event",
            Vec::new(),
        )?;
        row.as_deref().map(held).transpose()
    }

    /// Inserts the event row: the first delivery. Called only when
    /// [`Store::stored_state`], asked in the same synchronous step, said none.
    pub fn claim_first(
        &self,
        event: &VerifiedEvent,
        fault: Option<Fault>,
        verified: Option<&Verified>,
    ) -> Result<()> {
        let [scheme, secret, signed_at] = verified_columns(verified);
        // Moved, not concatenated: the body is not copied again.
        let mut values = event_columns(event);
        values.extend([
            EventState::Received.name().into(),
            fault.map_or(SqlStorageValue::Null, |f| f.name().into()),
            event
                .fence
                .as_deref()
                .map_or(SqlStorageValue::Null, Into::into),
            scheme,
            secret,
            signed_at,
            event
                .forward
                .as_deref()
                .map_or(SqlStorageValue::Null, Into::into),
        ]);
        let inserted = self.tables.first_into(
            Table::Event,
            "INSERT INTO event (singleton, source, provider, event_id, type, body, received_at, state, fault, fence,
                 sig_scheme, sig_secret, signed_at, forward)
             VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (singleton) DO NOTHING
             RETURNING singleton",
            values,
        )?;
        inserted
            .map(drop)
            .ok_or_else(|| "inbox row: already held".into())
    }

    /// Counts and logs a later delivery, as arrived at `now`. Called only
    /// when [`Store::stored_state`] found an event: the copy's body is
    /// hashed for the log, never written.
    pub fn log_copy(
        &self,
        event: &VerifiedEvent,
        now: i64,
        verified: Option<&Verified>,
    ) -> Result<()> {
        let [scheme, secret, signed_at] = verified_columns(verified);
        let logged = self.tables.first_into(
            Table::Deliveries,
            "INSERT INTO deliveries (at, bytes, sha256, sig_scheme, sig_secret, signed_at)
             VALUES (?, ?, ?, ?, ?, ?) RETURNING seq",
            vec![
                now.into(),
                (event.body.len() as i64).into(),
                event::sha256_hex(event.body.as_bytes()).into(),
                scheme,
                secret,
                signed_at,
            ],
        )?;
        if let Some(seq) = logged.as_deref().and_then(|r| r.first()).and_then(integer) {
            if seq > DELIVERIES_KEPT {
                self.tables.sql.exec(
                    "DELETE FROM deliveries WHERE seq <= ?",
                    vec![(seq - DELIVERIES_KEPT).into()],
                )?;
            }
        }
        Ok(())
    }

    /// Moves the event from `from` to `to`; a no-op in any other state.
    pub fn transition(&self, from: EventState, to: EventState) -> Result<()> {
        self.tables.sql.exec(
            "UPDATE event SET state = ? WHERE state = ?",
            vec![to.name().into(), from.name().into()],
        )?;
        Ok(())
    }

    /// A `received` event's effect committed: `done`. Returns its progress
    /// as this left it; `None` if it was not `received`.
    pub fn mark_done(&self, now: i64, replay_of: Option<String>) -> Result<Option<Held>> {
        let row = self.tables.first(
            "UPDATE event SET state = ?, done_at = ?, effect_attempts = effect_attempts + 1,
                 last_error = NULL, replay_of = ?
             WHERE state = ?
             RETURNING state, reported, received_at, done_at",
            vec![
                EventState::Done.name().into(),
                now.into(),
                replay_of.map_or(SqlStorageValue::Null, Into::into),
                EventState::Received.name().into(),
            ],
        )?;
        row.as_deref().map(held).transpose()
    }

    /// Records a failed attempt at a `received` event, counted unless it
    /// only waited for a store that could not be reached; returns the
    /// failures so far, read back from storage, not memory: the alarm and a
    /// delivery may both have tried. `None` when the event is not
    /// `received` (a replay of a finished event failed): nothing changes.
    pub fn record_failure(&self, error: &str, counted: bool) -> Result<Option<i64>> {
        let row = self.tables.first(
            "UPDATE event SET effect_attempts = effect_attempts + ?, last_error = ?
             WHERE state = ?
             RETURNING effect_attempts",
            vec![
                i64::from(counted).into(),
                error.into(),
                EventState::Received.name().into(),
            ],
        )?;
        Ok(row.as_deref().and_then(|r| r.first()).and_then(integer))
    }

    /// Whether `failed_events` lists the event.
    pub fn set_reported(&self, reported: bool) -> Result<()> {
        self.tables.sql.exec(
            "UPDATE event SET reported = ?",
            vec![i64::from(reported).into()],
        )?;
        Ok(())
    }

    /// A `failed` (or `dismissed`) event whose effect the ledger shows
    /// committed after all: `done`, and no longer listed. `done_at` is set
    /// when given, else kept (a dismissal's time stays).
    pub fn settle_as_done(&self, from: EventState, done_at: Option<i64>) -> Result<()> {
        self.tables.sql.exec(
            "UPDATE event SET state = ?, done_at = COALESCE(?, done_at), reported = 0
             WHERE state = ?",
            vec![
                EventState::Done.name().into(),
                done_at.map_or(SqlStorageValue::Null, Into::into),
                from.name().into(),
            ],
        )?;
        Ok(())
    }

    /// An operator's dismissal: of a `failed` event, before D1 records it;
    /// or found in D1 by an attempt at a reopened (`received`) one, whose
    /// reply was lost. `dismissed` as of `now`; nothing is listed.
    pub fn dismiss(&self, from: EventState, now: i64) -> Result<()> {
        self.tables.sql.exec(
            "UPDATE event SET state = ?, done_at = ?, reported = 0 WHERE state = ?",
            vec![
                EventState::Dismissed.name().into(),
                now.into(),
                from.name().into(),
            ],
        )?;
        Ok(())
    }

    /// A dismissal D1 may not have recorded: `failed` and unreported again,
    /// so that the alarm's report (which checks the ledger first) settles it.
    pub fn undo_dismissal(&self) -> Result<()> {
        self.tables.sql.exec(
            "UPDATE event SET state = ?, done_at = NULL, reported = 0 WHERE state = ?",
            vec![
                EventState::Failed.name().into(),
                EventState::Dismissed.name().into(),
            ],
        )?;
        Ok(())
    }

    /// After the object's storage was deleted: the tables are gone.
    pub fn forget(&self) {
        self.tables.forget();
    }

    /// The later deliveries, oldest first, and how many there ever were.
    pub fn later_deliveries(&self) -> Result<(i64, Vec<LoggedDelivery>)> {
        deliveries::later(&self.tables)
    }

    /// The tables of an object an older release left, holding `event`
    /// (tests only: see [`Fault::OlderTables`] and
    /// [`Fault::InterruptedUpgrade`]).
    pub fn make_older_tables(&self, event: &VerifiedEvent, interrupted: bool) -> Result<()> {
        self.tables
            .make_older_tables(event_columns(event), interrupted)
    }
}

/// A row of `state, reported, received_at, done_at`.
fn held(row: &[SqlStorageValue]) -> Result<Held> {
    let int = |i: usize| row.get(i).and_then(integer);
    let state = match row.first() {
        Some(SqlStorageValue::String(state)) => EventState::from_name(state),
        _ => None,
    };
    Ok(Held {
        state: state.ok_or("inbox row: unknown state")?,
        reported: int(1) == Some(1),
        received_at: int(2).unwrap_or_default(),
        done_at: int(3),
    })
}

/// The `source, provider, event_id, type, body, received_at` columns of the
/// event row, which every release's event table has.
fn event_columns(event: &VerifiedEvent) -> Vec<SqlStorageValue> {
    // Room for the claim's seven more.
    let mut columns = Vec::with_capacity(13);
    columns.extend([
        event.source.as_str().into(),
        event.provider.as_str().into(),
        event.id.as_str().into(),
        event.kind.as_str().into(),
        event.body.as_str().into(),
        event.received_at.into(),
    ]);
    columns
}
