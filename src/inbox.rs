//! `EventInbox`: one Durable Object per `"{source}:{event id}"`.
//!
//! The runtime runs one instance per name, so every copy of an event —
//! sequential retries or a storm of concurrent ones — meets in the same
//! object. The object decides "new or duplicate" with synchronous SQL: there
//! is no `.await` between reading and writing the claim, so no other request
//! can run in between (an `.await` on D1 or `fetch` would open the door).
//!
//! The object is the durable inbox, not the record of truth: the effect's
//! ledger row in D1 is. If the object's "done" mark is lost after the effect
//! committed, the retry finds the ledger row and counts that as success.
//!
//! State machine of the one `event` row:
//! `received` → `done` (the effect committed, or the ledger shows it did, or
//! the same signed body was applied under another id) or → `failed` (retry
//! budget spent). A `failed` event is kept until it is resolved: a new copy
//! reopens it for one more attempt, an operator's replay does the same, and
//! an operator's dismissal makes it `dismissed`. Only `done` and `dismissed`
//! events are forgotten at their retention deadline.
//!
//! An alarm is set while the row exists, on every path: armed at the claim
//! before the first attempt; re-armed by the alarm itself, first thing, as a
//! fallback before anything in it can fail; then set to the next retry, the
//! next try at reporting a failure to `failed_events`, or the retention
//! deadline.

use std::cell::Cell;

use serde::{Deserialize, Serialize};
use worker::wasm_bindgen;
use worker::{
    console_error, console_log, durable_object, Date, DurableObject, Env, Method, Request,
    Response, Result, SqlStorage, SqlStorageValue, State, Stub,
};

use crate::config::{InboxSettings, DB_BINDING};
use crate::effects::{self, Applied};
use crate::event::{dedupe_key, VerifiedEvent};
use crate::failed_events::{self, Recorded};
use crate::{http, outbox};

/// What a delivery did, as the sender is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// This copy was new and its effect committed.
    Processed,
    /// A copy of an event already held (in flight or done), or whose effect
    /// the ledger shows committed long ago, or a signed body already applied
    /// under another id. Nothing was done again.
    Duplicate,
    /// New and durably recorded, but the effect did not commit yet: the
    /// inbox's alarm retries it.
    Accepted,
    /// A copy of a failed event reopened it, and its one more attempt failed
    /// too. The event is held, and listed for operators.
    Failed,
    /// An operator dismissed the failed event: it will not be applied.
    Dismissed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Duplicate => "duplicate",
            Outcome::Accepted => "accepted",
            Outcome::Failed => "failed",
            Outcome::Dismissed => "dismissed",
        }
    }
}

/// An inbox's answer to a delivery, a replay or a dismissal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub outcome: Outcome,
    /// Set when the event's signed body was already applied under another
    /// id: the key (`"{source}:{id}"`) it duplicates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed_body_of: Option<String>,
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Self {
        Answer {
            outcome,
            replayed_body_of: None,
        }
    }
}

/// A fault the end-to-end tests inject to prove recovery. Only honoured when
/// the worker runs with `TEST_FAULTS = "enabled"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first effect attempt fails before touching D1 (a crash between
    /// claim and effect).
    FailBeforeEffect,
    /// Every effect attempt fails before touching D1 (D1 down for good):
    /// the retry budget runs out.
    EffectAlwaysFails,
    /// Every D1 write of this inbox — effect and failure report — fails
    /// until this time (ms since the epoch): an outage that outlasts the
    /// retry budget, then ends.
    D1DownUntil(i64),
    /// The first effect attempt commits in D1, then fails before the inbox
    /// marks it done (a lost reply from D1).
    FailAfterEffect,
    /// The effect commits, then sending its outbox keys to the queue fails;
    /// the cron relay must send them.
    FailEnqueue,
    /// Passed on to the queue consumer: it performs a side effect, then
    /// "crashes" before marking it sent.
    CrashAfterCall,
    /// Passed on to the queue consumer: its first run pauses this long (ms)
    /// after the call, before recording the result — past its lease, so
    /// another run may take the row over meanwhile.
    PauseBeforeComplete(i64),
    /// The claim fails: nothing is stored.
    FailClaim,
    /// The event is stored and its alarm armed, then the inbox's answer is
    /// lost (it errors before attempting the effect).
    LoseReply,
}

impl Fault {
    /// The name in the `x-test-fault` header and in storage
    /// (`d1-down-until:<ms>` carries its time).
    pub fn parse(name: &str) -> Option<Fault> {
        if let Some(until) = name.strip_prefix("d1-down-until:") {
            return until.parse().ok().map(Fault::D1DownUntil);
        }
        if let Some(ms) = name.strip_prefix("pause-before-complete:") {
            return ms.parse().ok().map(Fault::PauseBeforeComplete);
        }
        match name {
            "fail-before-effect" => Some(Fault::FailBeforeEffect),
            "effect-always-fails" => Some(Fault::EffectAlwaysFails),
            "fail-after-effect" => Some(Fault::FailAfterEffect),
            "fail-enqueue" => Some(Fault::FailEnqueue),
            "crash-after-call" => Some(Fault::CrashAfterCall),
            "fail-claim" => Some(Fault::FailClaim),
            "lose-reply" => Some(Fault::LoseReply),
            _ => None,
        }
    }

    fn name(self) -> String {
        match self {
            Fault::FailBeforeEffect => "fail-before-effect".into(),
            Fault::EffectAlwaysFails => "effect-always-fails".into(),
            Fault::D1DownUntil(until) => format!("d1-down-until:{until}"),
            Fault::FailAfterEffect => "fail-after-effect".into(),
            Fault::FailEnqueue => "fail-enqueue".into(),
            Fault::CrashAfterCall => "crash-after-call".into(),
            Fault::PauseBeforeComplete(ms) => format!("pause-before-complete:{ms}"),
            Fault::FailClaim => "fail-claim".into(),
            Fault::LoseReply => "lose-reply".into(),
        }
    }

    /// The faults the queue consumer acts on, passed on with the keys.
    fn for_outbox(self) -> Option<String> {
        matches!(self, Fault::CrashAfterCall | Fault::PauseBeforeComplete(_)).then(|| self.name())
    }

    /// Whether the fault hits an attempt after `attempts` earlier ones: all
    /// of them for the lasting faults, only the first for the others.
    fn applies(self, attempts: i64) -> bool {
        matches!(self, Fault::EffectAlwaysFails | Fault::D1DownUntil(_)) || attempts == 0
    }

    /// Whether the injected D1 outage is still going on.
    fn d1_down(fault: Option<Fault>) -> bool {
        matches!(fault, Some(Fault::D1DownUntil(until)) if now() < until)
    }
}

/// What the worker sends its inbox.
#[derive(Serialize, Deserialize)]
struct Delivery {
    event: VerifiedEvent,
    fault: Option<String>,
}

/// Why a delivery did not get an answer from its inbox.
#[derive(Debug)]
pub enum DeliveryError {
    /// Certainly not stored: the request never left, or the inbox said its
    /// claim failed. The sender's retry starts clean.
    NotRecorded(String),
    /// The inbox may hold the event (its answer was lost). A retry is safe:
    /// it is answered as a copy of the held event.
    Unconfirmed(String),
}

/// Hands a verified event to its inbox and returns what the inbox did.
pub async fn deliver(
    stub: &Stub,
    event: VerifiedEvent,
    fault: Option<Fault>,
) -> std::result::Result<Answer, DeliveryError> {
    let body = serde_json::to_string(&Delivery {
        event,
        fault: fault.map(Fault::name),
    })
    .map_err(|e| DeliveryError::NotRecorded(e.to_string()))?;
    let request = http::post("https://inbox/deliver", &body, &[])
        .map_err(|e| DeliveryError::NotRecorded(e.to_string()))?;
    let mut response = stub
        .fetch_with_request(request)
        .await
        .map_err(|e| DeliveryError::Unconfirmed(e.to_string()))?;
    match response.status_code() {
        200 => response
            .json()
            .await
            .map_err(|e| DeliveryError::Unconfirmed(e.to_string())),
        NOT_STORED => Err(DeliveryError::NotRecorded(
            "the inbox could not claim".into(),
        )),
        status => Err(DeliveryError::Unconfirmed(format!(
            "inbox answered {status}"
        ))),
    }
}

/// The inbox's status for "the claim failed: nothing was stored".
const NOT_STORED: u16 = 503;

/// The one event this inbox holds. Its row is also the record of the first
/// copy received (`received_at`); the outcome of that copy is `state`.
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

/// The last later copies: when each arrived, and its payload by size and
/// SHA-256 only (a copy that differs from the first stands out). Created
/// with the first duplicate, so an event delivered once (the common case)
/// costs one table, not two. The first copy is the event row itself. The
/// newest row's `seq` counts every copy ever logged: SQLite gives each
/// insert one more than the largest, only the oldest rows are deleted, and
/// as an `INTEGER PRIMARY KEY` it is kept as is by a VACUUM.
const COPIES_TABLE: &str = "CREATE TABLE IF NOT EXISTS copies (
        seq INTEGER PRIMARY KEY,
        at INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        sha256 TEXT NOT NULL
    )";

/// How many later copies the log keeps. A request replayed 20,000 times
/// must not make its event unreadable (SQLite values stop at 2 MB): the
/// rowid counts them all, the log keeps the last ones.
const COPIES_KEPT: i64 = 100;

/// The stored event, read column by column: never re-encoded through JSON,
/// so a body at the size cap loads whatever bytes it holds.
const LOAD_EVENT: &str = "SELECT source, provider, event_id, type, body, received_at, state,
        effect_attempts, fault, last_error, done_at, reported, replay_of, fence
    FROM event";

/// The event's states, as stored.
const RECEIVED: &str = "received";
const DONE: &str = "done";
const FAILED: &str = "failed";
const DISMISSED: &str = "dismissed";

/// The fallback an alarm arms before doing anything that could fail.
const FALLBACK_ALARM_MS: i64 = 60_000;

struct EventRow {
    event: VerifiedEvent,
    state: String,
    effect_attempts: i64,
    fault: Option<Fault>,
    last_error: Option<String>,
    done_at: Option<i64>,
    reported: bool,
    replay_of: Option<String>,
}

impl EventRow {
    fn decode(row: &[SqlStorageValue]) -> Result<Self> {
        let text = |i: usize| match row.get(i) {
            Some(SqlStorageValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        let int = |i: usize| match row.get(i) {
            Some(SqlStorageValue::Integer(n)) => Some(*n),
            Some(SqlStorageValue::Float(n)) => Some(*n as i64),
            _ => None,
        };
        let required = |i: usize| text(i).ok_or("inbox row: missing text column");
        let body = required(4)?;
        Ok(EventRow {
            event: VerifiedEvent {
                source: required(0)?,
                provider: required(1)?,
                id: required(2)?,
                kind: required(3)?,
                body_sha256: crate::event::sha256_hex(body.as_bytes()),
                fence: text(13),
                body,
                received_at: int(5).unwrap_or_default(),
            },
            state: required(6)?,
            effect_attempts: int(7).unwrap_or_default(),
            fault: text(8).as_deref().and_then(Fault::parse),
            last_error: text(9),
            done_at: int(10),
            reported: int(11).unwrap_or_default() != 0,
            replay_of: text(12),
        })
    }

    /// When a finished event may be forgotten: retention counted from its
    /// arrival, or from when it finished if that was later (an outage).
    fn expires_at(&self, settings: &InboxSettings) -> i64 {
        let from = self
            .done_at
            .unwrap_or(self.event.received_at)
            .max(self.event.received_at);
        from + settings.retention_ms
    }

    /// The fault still in force for the next attempt.
    fn pending_fault(&self) -> Option<Fault> {
        self.fault.filter(|f| f.applies(self.effect_attempts))
    }
}

/// An inbox's answer to `GET /state`: the event's progress, its body, and
/// its deliveries. Every one passed signature verification: nothing else
/// reaches an inbox.
#[derive(Serialize)]
struct Status {
    state: String,
    effect_attempts: i64,
    last_error: Option<String>,
    received_at: i64,
    done_at: Option<i64>,
    /// For a `failed` event: whether it is listed in `failed_events` yet.
    reported: bool,
    /// Every copy received, the first included.
    deliveries: i64,
    /// The first copy, then the last [`COPIES_KEPT`] later ones.
    attempts: Vec<Attempt>,
    /// The body exactly as signed.
    body: String,
}

#[derive(Serialize)]
struct Attempt {
    at: i64,
    /// `first` (the copy that created the event), `replayed_body` (a first
    /// copy whose signed body was already applied under `duplicate_of`), or
    /// `duplicate`.
    copy: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicate_of: Option<String>,
    bytes: i64,
    sha256: String,
}

/// What the claim found.
enum Claim {
    /// This copy is the first: the event row was inserted.
    First,
    /// The inbox already held the event, in this state.
    Held(String),
}

/// How one effect attempt ended.
enum Tried {
    Applied(Applied),
    /// Failed; the alarm retries it.
    WillRetry,
    /// Failed, and the budget is spent: the event is `failed`.
    GaveUp,
}

impl Tried {
    fn answer(self, source: &str) -> Answer {
        match self {
            Tried::Applied(Applied::Now) => Outcome::Processed.into(),
            Tried::Applied(Applied::Earlier) => Outcome::Duplicate.into(),
            Tried::Applied(Applied::Replayed { of }) => Answer {
                outcome: Outcome::Duplicate,
                replayed_body_of: Some(dedupe_key(source, &of)),
            },
            Tried::WillRetry => Outcome::Accepted.into(),
            Tried::GaveUp => Outcome::Failed.into(),
        }
    }
}

#[durable_object]
pub struct EventInbox {
    state: State,
    env: Env,
    sql: SqlStorage,
    /// Whether this instance has created (or upgraded) each table. Only a
    /// cache: after the retention deadline deletes them, they are created anew.
    event_table_ready: Cell<bool>,
    copies_table_ready: Cell<bool>,
    /// Whether this instance is inside an effect attempt right now. An
    /// attempt can only be in flight in the live instance, so memory is the
    /// right place; it keeps the alarm from racing a delivery's own attempt
    /// (harmless thanks to the ledger, but wasted work).
    effect_running: Cell<bool>,
}

impl DurableObject for EventInbox {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        EventInbox {
            state,
            env,
            sql,
            event_table_ready: Cell::new(false),
            copies_table_ready: Cell::new(false),
            effect_running: Cell::new(false),
        }
    }

    /// `POST /deliver` from the worker; `GET /state`, `POST /replay` and
    /// `POST /dismiss` for the admin API and the tests. None is reachable
    /// from outside: only the binding can call an object.
    async fn fetch(&self, mut req: Request) -> Result<Response> {
        match (req.method(), req.path().as_str()) {
            (Method::Post, "/deliver") => {
                let delivery: Delivery = serde_json::from_str(&req.text().await?)?;
                self.receive(delivery).await
            }
            (Method::Get, "/state") => match self.status()? {
                Some(status) => Response::from_json(&status),
                None => Response::error("no event", 404),
            },
            (Method::Post, "/replay") => match self.replay().await? {
                Some(answer) => Response::from_json(&answer),
                None => Response::error("no event", 404),
            },
            (Method::Post, "/dismiss") => self.dismiss().await,
            _ => Response::error("not found", 404),
        }
    }

    /// The safety net: retries an unfinished effect, retries the report of a
    /// failed one, or forgets a finished event once its retention has passed.
    async fn alarm(&self) -> Result<Response> {
        // First, before anything below can fail: whatever happens, this
        // object is called again.
        self.set_alarm_in(FALLBACK_ALARM_MS).await?;
        let Some(row) = self.held()? else {
            self.state.storage().delete_alarm().await?;
            return Response::ok("empty");
        };
        let settings = InboxSettings::from_env(&self.env).map_err(|e| e.to_string())?;
        match row.state.as_str() {
            RECEIVED if self.effect_running.get() => {
                self.set_alarm_in(settings.retry_base_ms).await?;
                Response::ok("attempt in flight")
            }
            RECEIVED => {
                let fault = row.pending_fault();
                self.retry_now(row, fault, &settings).await?;
                Response::ok("retried")
            }
            FAILED => {
                self.report_failure(&row, &settings).await?;
                Response::ok("failure reported")
            }
            // Done, but still listed as failed: take it off first.
            DONE if row.reported && !self.resolve_report(&row.event).await => {
                self.set_alarm_in(settings.backoff_ms(row.effect_attempts.max(1)))
                    .await?;
                Response::ok("failure report still to resolve")
            }
            _ if now() >= row.expires_at(&settings) => {
                // Storage first: should deleting it fail, the alarm stays.
                let storage = self.state.storage();
                storage.delete_all().await?;
                storage.delete_alarm().await?;
                self.event_table_ready.set(false);
                self.copies_table_ready.set(false);
                Response::ok("expired")
            }
            _ => {
                self.set_alarm_at(row.expires_at(&settings)).await?;
                Response::ok("rescheduled")
            }
        }
    }
}

impl EventInbox {
    /// Whether this object has an event table at all; asked without creating
    /// one, so that reading an empty object leaves it empty.
    fn event_table(&self) -> Result<Option<String>> {
        self.one_text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'event'")
    }

    /// The one text value a query returns, if it returns one. Synchronous.
    fn one_text(&self, query: &str) -> Result<Option<String>> {
        let row = self.sql.exec(query, None)?.raw().next().transpose()?;
        Ok(match row.as_deref() {
            Some([SqlStorageValue::String(text)]) => Some(text.clone()),
            _ => None,
        })
    }

    /// Creates the event table, or upgrades one made before its newer
    /// columns. Once per instance; synchronous.
    fn ensure_event_table(&self) -> Result<()> {
        if self.event_table_ready.get() {
            return Ok(());
        }
        let existing = self.event_table()?;
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
        self.event_table_ready.set(true);
        Ok(())
    }

    /// Whether the copies table exists (created with the first duplicate),
    /// asked without creating it.
    fn copies_table(&self) -> Result<bool> {
        if self.copies_table_ready.get() {
            return Ok(true);
        }
        let found = self
            .sql
            .exec(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'copies'",
                None,
            )?
            .raw()
            .next()
            .is_some();
        self.copies_table_ready.set(found);
        Ok(found)
    }

    fn ensure_copies_table(&self) -> Result<()> {
        if !self.copies_table_ready.get() {
            self.sql.exec(COPIES_TABLE, None)?;
            self.copies_table_ready.set(true);
        }
        Ok(())
    }

    /// The held event, if any, without creating tables in an object that
    /// never held one (or has forgotten it).
    fn held(&self) -> Result<Option<EventRow>> {
        if !self.event_table_ready.get() {
            let Some(existing) = self.event_table()? else {
                return Ok(None);
            };
            self.prepare_event_table(Some(existing))?;
        }
        self.load()
    }

    fn load(&self) -> Result<Option<EventRow>> {
        let row = self.sql.exec(LOAD_EVENT, None)?.raw().next().transpose()?;
        row.map(|row| EventRow::decode(&row)).transpose()
    }

    async fn receive(&self, delivery: Delivery) -> Result<Response> {
        let Delivery { event, fault } = delivery;
        let fault = fault.as_deref().and_then(Fault::parse);
        let settings = InboxSettings::from_env(&self.env).map_err(|e| e.to_string())?;

        // The claim. Synchronous SQL only: between the insert and the
        // duplicate record no other request can run, and both are durable
        // before the reply leaves (the output gate holds it). If it fails,
        // nothing was stored, and the worker may say so.
        let claim = match self.ensure_event_table().and_then(|()| {
            if fault == Some(Fault::FailClaim) {
                return Err("injected fault: claim".into());
            }
            self.claim(&event, fault)
        }) {
            Ok(claim) => claim,
            Err(e) => {
                log(&LogLine::new("claim_failed", &event.key()).error(&e.to_string()));
                return Response::error("not stored", NOT_STORED);
            }
        };
        let answer = match claim {
            Claim::First => {
                // Armed before the first attempt, so a crash from here on is
                // retried. The alarm finds the event done and re-arms for the
                // retention deadline: one storage write fewer on the reply's path.
                self.set_alarm_in(settings.retry_base_ms).await?;
                if fault == Some(Fault::LoseReply) {
                    return Err("injected fault: the reply is lost".into());
                }
                let source = event.source.clone();
                self.attempt_effect(event, fault, &settings)
                    .await?
                    .answer(&source)
            }
            // A new copy of a failed event reopens it for one more attempt:
            // a merchant's "resend" after an outage is answered by applying it.
            Claim::Held(state) if state == FAILED => self.reopen(&settings).await?,
            Claim::Held(_) => Outcome::Duplicate.into(),
        };
        Response::from_json(&answer)
    }

    /// Inserts the event row if this object holds none; otherwise counts and
    /// logs this copy and returns the held event's state.
    fn claim(&self, event: &VerifiedEvent, fault: Option<Fault>) -> Result<Claim> {
        let inserted = self
            .sql
            .exec(
                "INSERT INTO event (singleton, source, provider, event_id, type, body, received_at, state, fault, fence)
                 VALUES (1, ?, ?, ?, ?, ?, ?, 'received', ?, ?)
                 ON CONFLICT (singleton) DO NOTHING
                 RETURNING singleton",
                vec![
                    event.source.as_str().into(),
                    event.provider.as_str().into(),
                    event.id.as_str().into(),
                    event.kind.as_str().into(),
                    event.body.as_str().into(),
                    event.received_at.into(),
                    fault.map_or(SqlStorageValue::Null, |f| f.name().into()),
                    event.fence.as_deref().map_or(SqlStorageValue::Null, Into::into),
                ],
            )?
            .raw()
            .next()
            .transpose()?;
        if inserted.is_some() {
            return Ok(Claim::First);
        }
        let state = self.state_now()?.ok_or("inbox row: unreadable state")?;
        self.ensure_copies_table()?;
        let logged = self
            .sql
            .exec(
                "INSERT INTO copies (at, bytes, sha256) VALUES (?, ?, ?) RETURNING rowid",
                vec![
                    now().into(),
                    (event.body.len() as i64).into(),
                    event.body_sha256.as_str().into(),
                ],
            )?
            .raw()
            .next()
            .transpose()?;
        if let Some([SqlStorageValue::Integer(copies)]) = logged.as_deref() {
            if *copies > COPIES_KEPT {
                self.sql.exec(
                    "DELETE FROM copies WHERE rowid <= ?",
                    vec![(*copies - COPIES_KEPT).into()],
                )?;
            }
        }
        Ok(Claim::Held(state))
    }

    /// One more attempt at a failed event for a new copy of it.
    async fn reopen(&self, settings: &InboxSettings) -> Result<Answer> {
        self.reopen_failed(settings).await?;
        let row = self.load()?.ok_or("inbox row vanished")?;
        let fault = row.pending_fault();
        self.retry_now(row, fault, settings).await
    }

    /// Marks a `failed` event `received` synchronously, so that copies
    /// arriving meanwhile are duplicates of the attempt about to run, and
    /// arms a near alarm, so that the attempt is retried if this instance
    /// dies during it (the alarm left by the failure is a retention away).
    async fn reopen_failed(&self, settings: &InboxSettings) -> Result<()> {
        self.sql.exec(
            "UPDATE event SET state = 'received' WHERE state = 'failed'",
            None,
        )?;
        self.set_alarm_in(settings.retry_base_ms).await
    }

    /// An operator's replay: runs the effect path again for the held event,
    /// without test faults. A `failed` event is reopened first. For an event
    /// already done it is a no-op: the ledger answers `Earlier`, reported as
    /// `duplicate`. `None` when the inbox holds no event (never, or expired).
    async fn replay(&self) -> Result<Option<Answer>> {
        let Some(row) = self.held()? else {
            return Ok(None);
        };
        if row.state == DISMISSED {
            return Ok(Some(Outcome::Dismissed.into()));
        }
        if self.effect_running.get() {
            return Ok(Some(Outcome::Accepted.into()));
        }
        let settings = InboxSettings::from_env(&self.env).map_err(|e| e.to_string())?;
        if row.state == FAILED {
            self.reopen_failed(&settings).await?;
        }
        Ok(Some(self.retry_now(row, None, &settings).await?))
    }

    /// An attempt off the first delivery's path (the alarm, a reopening
    /// copy, a replay): on success the alarm moves to the retention
    /// deadline, counted from now, when the event finished.
    async fn retry_now(
        &self,
        row: EventRow,
        fault: Option<Fault>,
        settings: &InboxSettings,
    ) -> Result<Answer> {
        let source = row.event.source.clone();
        let backoff = settings.backoff_ms(row.effect_attempts.max(1));
        let tried = self.attempt_effect(row.event, fault, settings).await?;
        if matches!(tried, Tried::Applied(_)) {
            // Still listed as failed (D1 refused the resolve): the alarm
            // tries again soon, not a retention away.
            let listed = self.one_text("SELECT CAST(reported AS TEXT) FROM event")?;
            let listed = listed.as_deref() == Some("1");
            let next = if listed {
                backoff
            } else {
                settings.retention_ms
            };
            self.set_alarm_in(next).await?;
        }
        Ok(tried.answer(&source))
    }

    /// An operator's decision not to apply a failed event. The state moves
    /// first, synchronously, so that a copy arriving while D1 records the
    /// decision is a duplicate, not a reopening. D1 records it as handled in
    /// the ledger, so no later copy applies it, even after this inbox
    /// forgets. Should the ledger show the effect committed after all (a
    /// lost reply, or the same body under another id), there is nothing to
    /// dismiss: the event is done, and the answer says `duplicate`.
    async fn dismiss(&self) -> Result<Response> {
        let Some(row) = self.held()? else {
            return Response::error("no event", 404);
        };
        if row.state != FAILED {
            return Response::error("only a failed event can be dismissed", 409);
        }
        let settings = InboxSettings::from_env(&self.env).map_err(|e| e.to_string())?;
        self.sql.exec(
            "UPDATE event SET state = 'dismissed', done_at = ? WHERE state = 'failed'",
            vec![now().into()],
        )?;
        let answer = match failed_events::dismiss(&self.env, &row.event).await {
            Ok(Applied::Now) => {
                log(&LogLine::new("event_dismissed", &row.event.key()));
                Outcome::Dismissed
            }
            Ok(_) => {
                self.sql.exec(
                    "UPDATE event SET state = 'done', reported = 0 WHERE state = 'dismissed'",
                    None,
                )?;
                Outcome::Duplicate
            }
            Err(e) => {
                // Unknown whether D1 committed (its reply may be what was
                // lost): back to failed and unreported, and the alarm's
                // report, which checks the ledger first, settles it soon.
                self.sql.exec(
                    "UPDATE event SET state = 'failed', done_at = NULL, reported = 0
                     WHERE state = 'dismissed'",
                    None,
                )?;
                self.set_alarm_in(settings.retry_base_ms).await?;
                return Err(e);
            }
        };
        self.set_alarm_in(settings.retention_ms).await?;
        Response::from_json(&Answer::from(answer))
    }

    /// The event's progress and its deliveries, without creating tables in
    /// an object that never held an event (or has forgotten it).
    fn status(&self) -> Result<Option<Status>> {
        let Some(row) = self.held()? else {
            return Ok(None);
        };
        let first = Attempt {
            at: row.event.received_at,
            copy: if row.replay_of.is_some() {
                "replayed_body"
            } else {
                "first"
            },
            duplicate_of: row
                .replay_of
                .as_deref()
                .map(|of| dedupe_key(&row.event.source, of)),
            bytes: row.event.body.len() as i64,
            sha256: row.event.body_sha256.clone(),
        };
        let mut attempts = vec![first];
        let mut copies = 0;
        if self.copies_table()? {
            for copy in self
                .sql
                .exec(
                    "SELECT rowid, at, bytes, sha256 FROM copies ORDER BY rowid",
                    None,
                )?
                .raw()
            {
                if let [SqlStorageValue::Integer(rowid), SqlStorageValue::Integer(at), SqlStorageValue::Integer(bytes), SqlStorageValue::String(sha256)] =
                    copy?.as_slice()
                {
                    copies = *rowid;
                    attempts.push(Attempt {
                        at: *at,
                        copy: "duplicate",
                        duplicate_of: None,
                        bytes: *bytes,
                        sha256: sha256.clone(),
                    });
                }
            }
        }
        Ok(Some(Status {
            state: row.state,
            effect_attempts: row.effect_attempts,
            last_error: row.last_error,
            received_at: row.event.received_at,
            done_at: row.done_at,
            reported: row.reported,
            deliveries: copies + 1,
            attempts,
            body: row.event.body,
        }))
    }

    /// One try at the effect. On success marks the event done; on failure
    /// records the error and arms the next retry, or marks the event failed
    /// once the budget is spent and reports it. `fault` is for tests (see
    /// [`Fault`]).
    async fn attempt_effect(
        &self,
        event: VerifiedEvent,
        fault: Option<Fault>,
        settings: &InboxSettings,
    ) -> Result<Tried> {
        self.effect_running.set(true);
        let result = self.run_effect(&event, fault).await;
        self.effect_running.set(false);
        match result {
            Ok(applied) => {
                let replay_of = match &applied {
                    Applied::Replayed { of } => Some(of.clone()),
                    _ => None,
                };
                if let Some(of) = &replay_of {
                    let key = event.key();
                    log(&LogLine::new("replayed_body", &key)
                        .duplicate_of(dedupe_key(&event.source, of)));
                }
                let was_reported = self
                    .sql
                    .exec(
                        "UPDATE event SET state = 'done', done_at = ?, effect_attempts = effect_attempts + 1,
                             last_error = NULL, replay_of = ?
                         WHERE state = 'received'
                         RETURNING reported",
                        vec![now().into(), replay_of.into()],
                    )?
                    .raw()
                    .next()
                    .transpose()?;
                if matches!(was_reported.as_deref(), Some([SqlStorageValue::Integer(1)])) {
                    // Listed as failed before this attempt: no longer. If D1
                    // refuses, `reported` stays set and the alarm tries again.
                    self.resolve_report(&event).await;
                }
                Ok(Tried::Applied(applied))
            }
            Err(error) => {
                let Some(failures) = self.record_failure(&error)? else {
                    // Not an attempt at a pending event (an operator's
                    // replay of a finished one): nothing changed.
                    return Err(format!("replay failed, the event is unchanged: {error}").into());
                };
                let exhausted = failures >= settings.max_attempts;
                log(&LogLine::new("effect_failed", &event.key())
                    .attempt(failures, exhausted)
                    .error(&error));
                if !exhausted {
                    self.set_alarm_in(settings.backoff_ms(failures)).await?;
                    return Ok(Tried::WillRetry);
                }
                self.sql.exec(
                    "UPDATE event SET state = 'failed' WHERE state = 'received'",
                    None,
                )?;
                let row = self.load()?.ok_or("inbox row vanished")?;
                self.report_failure(&row, settings).await?;
                // The report may have found the effect in the ledger after
                // all (an attempt whose reply was lost): then it is done.
                Ok(match self.state_now()?.as_deref() {
                    Some(DONE) => Tried::Applied(Applied::Earlier),
                    _ => Tried::GaveUp,
                })
            }
        }
    }

    /// Lists a failed event in `failed_events` unless it is already, and
    /// arms the alarm: to try the report again if D1 refused it, else to
    /// look again in a retention period (a failed event is never forgotten).
    async fn report_failure(&self, row: &EventRow, settings: &InboxSettings) -> Result<()> {
        if row.reported {
            return self.set_alarm_in(settings.retention_ms).await;
        }
        let error = row.last_error.as_deref().unwrap_or("unknown");
        let written = if Fault::d1_down(row.fault) {
            Err("injected fault: D1 unavailable".into())
        } else {
            failed_events::record(&self.env, &row.event, error).await
        };
        // D1 was awaited: a copy or an operator may have moved the event on
        // meanwhile (reopened it, dismissed it). Then this report is moot,
        // and the alarm is theirs to set.
        if self.state_now()?.as_deref() != Some(FAILED) {
            return Ok(());
        }
        match written {
            Ok(Recorded::Listed) => {
                self.sql.exec("UPDATE event SET reported = 1", None)?;
                self.set_alarm_in(settings.retention_ms).await
            }
            Ok(Recorded::AlreadyHandled) => {
                // The ledger holds the event: its effect committed after all
                // (a lost reply), or an operator's dismissal did whose reply
                // was lost. Nothing is owed: it is done.
                self.sql.exec(
                    "UPDATE event SET state = 'done', done_at = ?, reported = 0 WHERE state = 'failed'",
                    vec![now().into()],
                )?;
                self.set_alarm_in(settings.retention_ms).await
            }
            Err(e) => {
                log(&LogLine::new("failure_report_failed", &row.event.key()).error(&e.to_string()));
                let retry = settings.backoff_ms(row.effect_attempts.max(1));
                self.set_alarm_in(retry).await
            }
        }
    }

    /// The event's state as stored now (after an `.await`, memory may be stale).
    fn state_now(&self) -> Result<Option<String>> {
        self.one_text("SELECT state FROM event")
    }

    async fn run_effect(
        &self,
        event: &VerifiedEvent,
        fault: Option<Fault>,
    ) -> std::result::Result<Applied, String> {
        if matches!(
            fault,
            Some(Fault::FailBeforeEffect | Fault::EffectAlwaysFails)
        ) {
            return Err("injected fault: before effect".into());
        }
        if Fault::d1_down(fault) {
            return Err("injected fault: D1 unavailable".into());
        }
        let plan =
            effects::plan(event, now()).map_err(|e| format!("unplannable event: {}", e.0))?;
        let db = self.env.d1(DB_BINDING).map_err(|e| e.to_string())?;
        let applied = effects::apply(&db, event, plan.batch)
            .await
            .map_err(|e| e.to_string())?;
        if fault == Some(Fault::FailAfterEffect) {
            return Err("injected fault: after effect committed".into());
        }
        if matches!(applied, Applied::Replayed { .. }) {
            // This id's outbox rows were never written: nothing to send.
            return Ok(applied);
        }
        // After the commit, never before: a message must not outrun its row.
        // Also after `Earlier`: that attempt's send may be what was lost.
        let sent = if fault == Some(Fault::FailEnqueue) {
            Err("injected fault: enqueue".into())
        } else {
            let fault = fault.and_then(Fault::for_outbox);
            outbox::enqueue(&self.env, &plan.outbox_keys, fault.as_deref()).await
        };
        if let Err(e) = sent {
            // Nothing is lost: the rows are committed as pending, and the
            // cron relay sends them after its grace period.
            log(&LogLine::new("enqueue_failed", &event.key()).error(&e.to_string()));
        }
        Ok(applied)
    }

    /// Counts a failed attempt at a `received` event; returns the failures
    /// so far, read back from storage, not memory: the alarm and a delivery
    /// may both have tried. `None` when the event is not `received` (a
    /// replay of a finished event failed): nothing is counted.
    fn record_failure(&self, error: &str) -> Result<Option<i64>> {
        let row = self
            .sql
            .exec(
                "UPDATE event SET effect_attempts = effect_attempts + 1, last_error = ?
                 WHERE state = 'received'
                 RETURNING effect_attempts",
                vec![error.into()],
            )?
            .raw()
            .next()
            .transpose()?;
        Ok(match row.as_deref() {
            Some([SqlStorageValue::Integer(n)]) => Some(*n),
            Some([SqlStorageValue::Float(n)]) => Some(*n as i64),
            _ => None,
        })
    }

    /// Takes a done event off the failed list; clears `reported` once D1
    /// has. A refusal is logged, and the alarm tries again.
    async fn resolve_report(&self, event: &VerifiedEvent) -> bool {
        match failed_events::resolve(&self.env, &event.source, &event.id).await {
            Ok(()) => {
                let cleared = self.sql.exec("UPDATE event SET reported = 0", None);
                cleared.is_ok()
            }
            Err(e) => {
                log(&LogLine::new("failed_event_unresolved", &event.key()).error(&e.to_string()));
                false
            }
        }
    }

    async fn set_alarm_in(&self, delay_ms: i64) -> Result<()> {
        self.state.storage().set_alarm(delay_ms).await
    }

    async fn set_alarm_at(&self, at_ms: i64) -> Result<()> {
        self.set_alarm_in((at_ms - now()).max(0)).await
    }
}

/// The inbox's log lines: one JSON object each, never a payload or secret.
#[derive(Serialize)]
struct LogLine<'a> {
    msg: &'static str,
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<i64>,
    /// True when the retry budget is spent and the event is marked failed.
    #[serde(rename = "final", skip_serializing_if = "Option::is_none")]
    last: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicate_of: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

impl<'a> LogLine<'a> {
    fn new(msg: &'static str, key: &'a str) -> Self {
        LogLine {
            msg,
            key,
            attempt: None,
            last: None,
            duplicate_of: None,
            error: None,
        }
    }

    fn attempt(mut self, attempt: i64, last: bool) -> Self {
        self.attempt = Some(attempt);
        self.last = Some(last);
        self
    }

    fn duplicate_of(mut self, key: String) -> Self {
        self.duplicate_of = Some(key);
        self
    }

    fn error(mut self, error: &'a str) -> Self {
        self.error = Some(error);
        self
    }
}

/// Failures go to the error stream, the rest (a replayed body, a dismissal)
/// to the log.
fn log(line: &LogLine) {
    let json = serde_json::to_string(line).unwrap_or_default();
    if line.error.is_some() || line.last.is_some() {
        console_error!("{json}");
    } else {
        console_log!("{json}");
    }
}

fn now() -> i64 {
    Date::now().as_millis() as i64
}
