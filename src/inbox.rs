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
//! `received` → `done` (effect committed) or → `failed` (retry budget spent).
//! An alarm is always set while the row exists: the retry of an unfinished
//! effect, then the retention deadline, when the object deletes its storage.

use std::cell::Cell;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use worker::wasm_bindgen;
use worker::{
    console_error, durable_object, Date, DurableObject, Env, Method, Request, Response, Result,
    SqlCursor, SqlStorage, SqlStorageValue, State, Stub,
};

use crate::config::{InboxSettings, DB_BINDING};
use crate::effects::{self, Applied};
use crate::event::VerifiedEvent;
use crate::{failed_events, http, outbox};

/// What a delivery did, as the sender is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// This copy was new and its effect committed.
    Processed,
    /// A copy of an event already held (in flight or done), or whose effect
    /// the ledger shows committed long ago. Nothing was done again.
    Duplicate,
    /// New and durably recorded, but the effect did not commit yet: the
    /// inbox's alarm retries it.
    Accepted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Duplicate => "duplicate",
            Outcome::Accepted => "accepted",
        }
    }

    fn parse(name: &str) -> Option<Outcome> {
        [Outcome::Processed, Outcome::Duplicate, Outcome::Accepted]
            .into_iter()
            .find(|o| o.as_str() == name)
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
    /// The first effect attempt commits in D1, then fails before the inbox
    /// marks it done (a lost reply from D1).
    FailAfterEffect,
    /// The effect commits, then sending its outbox keys to the queue fails;
    /// the cron relay must send them.
    FailEnqueue,
    /// Passed on to the queue consumer: it performs a side effect, then
    /// "crashes" before marking it sent.
    CrashAfterCall,
}

impl Fault {
    /// The name in the `x-test-fault` header and in storage.
    pub fn parse(name: &str) -> Option<Fault> {
        match name {
            "fail-before-effect" => Some(Fault::FailBeforeEffect),
            "effect-always-fails" => Some(Fault::EffectAlwaysFails),
            "fail-after-effect" => Some(Fault::FailAfterEffect),
            "fail-enqueue" => Some(Fault::FailEnqueue),
            "crash-after-call" => Some(Fault::CrashAfterCall),
            _ => None,
        }
    }

    /// Whether the fault hits an attempt after `attempts` earlier ones: all
    /// of them for `EffectAlwaysFails`, only the first for the others.
    fn applies(self, attempts: i64) -> bool {
        self == Fault::EffectAlwaysFails || attempts == 0
    }

    fn as_str(self) -> &'static str {
        match self {
            Fault::FailBeforeEffect => "fail-before-effect",
            Fault::EffectAlwaysFails => "effect-always-fails",
            Fault::FailAfterEffect => "fail-after-effect",
            Fault::FailEnqueue => "fail-enqueue",
            Fault::CrashAfterCall => "crash-after-call",
        }
    }
}

/// What the worker sends its inbox.
#[derive(Serialize, Deserialize)]
struct Delivery {
    event: VerifiedEvent,
    fault: Option<String>,
}

/// Hands a verified event to its inbox and returns what the inbox did (the
/// inbox answers with the outcome's name as plain text).
pub async fn deliver(stub: &Stub, event: VerifiedEvent, fault: Option<Fault>) -> Result<Outcome> {
    let fault = fault.map(|f| f.as_str().to_string());
    let body = serde_json::to_string(&Delivery { event, fault })?;
    let request = http::post("https://inbox/deliver", &body, &[])?;
    let mut response = stub.fetch_with_request(request).await?;
    if response.status_code() != 200 {
        return Err(format!("inbox answered {}", response.status_code()).into());
    }
    let outcome = response.text().await?;
    Outcome::parse(&outcome).ok_or_else(|| format!("inbox answered '{outcome}'").into())
}

/// The one event this inbox holds. Its row is also the record of the first
/// copy received (`received_at`); the outcome of that copy is `state`.
const EVENT_TABLE: &str = "CREATE TABLE IF NOT EXISTS event (
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

/// Every later copy: when it arrived, and its payload by size and SHA-256
/// only (a copy that differs from the first stands out). Created with the
/// first duplicate, so an event delivered once (the common case) costs one
/// table, not two. The first copy is the event row itself.
const COPIES_TABLE: &str = "CREATE TABLE IF NOT EXISTS copies (
        at INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        sha256 TEXT NOT NULL
    )";

/// The stored event, as the retry path needs it (see [`json_rows`]).
const LOAD_EVENT: &str = "SELECT json_object(
        'source', source, 'provider', provider, 'event_id', event_id, 'type', type,
        'body', body, 'received_at', received_at, 'state', state,
        'effect_attempts', effect_attempts, 'fault', fault)
    FROM event";

#[derive(Deserialize)]
struct EventRow {
    source: String,
    provider: String,
    event_id: String,
    #[serde(rename = "type")]
    kind: String,
    body: String,
    received_at: i64,
    state: String,
    effect_attempts: i64,
    fault: Option<String>,
}

/// What `GET /state` reads (see [`json_rows`]).
const STATUS: &str = "SELECT json_object(
        'state', state, 'effect_attempts', effect_attempts, 'last_error', last_error,
        'received_at', received_at, 'done_at', done_at, 'body', body,
        'copies', (SELECT json_group_array(json_object('at', at, 'bytes', bytes, 'sha256', sha256))
                   FROM copies))
    FROM event";

#[derive(Deserialize)]
struct StatusRow {
    state: String,
    effect_attempts: i64,
    last_error: Option<String>,
    received_at: i64,
    done_at: Option<i64>,
    body: String,
    /// JSON text: `json_group_array` nested in `json_object` comes as a string.
    copies: serde_json::Value,
}

/// An inbox's answer to `GET /state`: the event's progress and every
/// delivery of it. Every one passed signature verification: nothing else
/// reaches an inbox.
#[derive(Serialize)]
struct Status {
    state: String,
    effect_attempts: i64,
    last_error: Option<String>,
    received_at: i64,
    done_at: Option<i64>,
    deliveries: usize,
    attempts: Vec<Attempt>,
}

#[derive(Serialize, Deserialize)]
struct Attempt {
    at: i64,
    /// `first` (the copy that created the event) or `duplicate`.
    #[serde(default = "duplicate")]
    copy: String,
    bytes: i64,
    sha256: String,
}

fn duplicate() -> String {
    "duplicate".into()
}

/// Size and SHA-256 (hex) of a payload: what the delivery log keeps of it.
fn fingerprint(body: &str) -> (i64, String) {
    use sha2::{Digest, Sha256};
    (
        body.len() as i64,
        hex::encode(Sha256::digest(body.as_bytes())),
    )
}

impl EventRow {
    fn event(self) -> VerifiedEvent {
        VerifiedEvent {
            source: self.source,
            provider: self.provider,
            id: self.event_id,
            kind: self.kind,
            body: self.body,
            received_at: self.received_at,
        }
    }
}

#[durable_object]
pub struct EventInbox {
    state: State,
    env: Env,
    sql: SqlStorage,
    /// Whether this instance has created each table. Only a cache: after
    /// the retention deadline deletes them, the tables are created anew.
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

    /// `POST /deliver` from the worker; `GET /state` and `POST /replay` for
    /// tests and the admin API. None is reachable from outside: only the
    /// binding can call an object.
    async fn fetch(&self, mut req: Request) -> Result<Response> {
        if req.method() == Method::Get {
            return match self.status()? {
                Some(status) => Response::from_json(&status),
                None => Response::error("no event", 404),
            };
        }
        if req.path() == "/replay" {
            return match self.replay().await? {
                Some(outcome) => Response::ok(outcome.as_str()),
                None => Response::error("no event", 404),
            };
        }
        let delivery: Delivery = serde_json::from_str(&req.text().await?)?;
        let outcome = self.receive(delivery).await?;
        Response::ok(outcome.as_str())
    }

    /// The safety net: retries an unfinished effect, or forgets the event
    /// once its retention has passed.
    async fn alarm(&self) -> Result<Response> {
        self.ensure_table(&self.event_table_ready, EVENT_TABLE)?;
        let Some(row) = self.load()? else {
            return Response::ok("empty");
        };
        let settings = InboxSettings::from_env(&self.env).map_err(|e| e.to_string())?;
        if row.state == "received" {
            if self.effect_running.get() {
                self.set_alarm_in(settings.retry_base_ms).await?;
                return Response::ok("attempt in flight");
            }
            let fault = row
                .fault
                .as_deref()
                .and_then(Fault::parse)
                .filter(|f| f.applies(row.effect_attempts));
            self.attempt_effect(row.event(), fault, &settings).await?;
            return Response::ok("retried");
        }
        let expires_at = row.received_at + settings.retention_ms;
        if now() >= expires_at {
            let storage = self.state.storage();
            storage.delete_alarm().await?;
            storage.delete_all().await?;
            self.event_table_ready.set(false);
            self.copies_table_ready.set(false);
            return Response::ok("expired");
        }
        self.set_alarm_at(expires_at).await?;
        Response::ok("rescheduled")
    }
}

impl EventInbox {
    /// Runs a `CREATE TABLE IF NOT EXISTS` once per instance. Synchronous.
    fn ensure_table(&self, ready: &Cell<bool>, create: &str) -> Result<()> {
        if !ready.get() {
            self.sql.exec(create, None)?;
            ready.set(true);
        }
        Ok(())
    }

    async fn receive(&self, delivery: Delivery) -> Result<Outcome> {
        let Delivery { event, fault } = delivery;
        let fault = fault.as_deref().and_then(Fault::parse);
        let settings = InboxSettings::from_env(&self.env).map_err(|e| e.to_string())?;

        // The claim. Synchronous SQL only: between the insert and the
        // duplicate record no other request can run, and both are durable
        // before the reply leaves (the output gate holds it).
        self.ensure_table(&self.event_table_ready, EVENT_TABLE)?;
        if !self.claim(&event, fault)? {
            self.record_copy(&event.body)?;
            return Ok(Outcome::Duplicate);
        }

        // Armed before the first attempt, so a crash from here on is retried.
        self.set_alarm_in(settings.retry_base_ms).await?;
        Ok(match self.attempt_effect(event, fault, &settings).await? {
            Some(Applied::Now) => Outcome::Processed,
            Some(Applied::Earlier) => Outcome::Duplicate,
            None => Outcome::Accepted,
        })
    }

    /// An operator's replay: runs the effect path again for the held event,
    /// without test faults. A `failed` event is reopened first. For an event
    /// already done it is a no-op: the ledger answers `Earlier`, reported as
    /// `duplicate`. `None` when the inbox holds no event (never, or expired).
    async fn replay(&self) -> Result<Option<Outcome>> {
        self.ensure_table(&self.event_table_ready, EVENT_TABLE)?;
        let Some(row) = self.load()? else {
            return Ok(None);
        };
        if self.effect_running.get() {
            return Ok(Some(Outcome::Accepted));
        }
        let was_failed = row.state == "failed";
        self.sql.exec(
            "UPDATE event SET state = 'received' WHERE state = 'failed'",
            None,
        )?;
        let settings = InboxSettings::from_env(&self.env).map_err(|e| e.to_string())?;
        let event = row.event();
        let key = (event.source.clone(), event.id.clone());
        let applied = self.attempt_effect(event, None, &settings).await?;
        if was_failed && applied.is_some() {
            let (source, id) = key;
            failed_events::resolve(&self.env, &source, &id).await;
        }
        Ok(Some(match applied {
            Some(Applied::Now) => Outcome::Processed,
            Some(Applied::Earlier) => Outcome::Duplicate,
            None => Outcome::Accepted,
        }))
    }

    /// Inserts the event row if this object holds none. True when this call
    /// inserted it, i.e. this copy is the first.
    fn claim(&self, event: &VerifiedEvent, fault: Option<Fault>) -> Result<bool> {
        let inserted = self
            .sql
            .exec(
                "INSERT INTO event (singleton, source, provider, event_id, type, body, received_at, state, fault)
                 VALUES (1, ?, ?, ?, ?, ?, ?, 'received', ?)
                 ON CONFLICT (singleton) DO NOTHING
                 RETURNING singleton",
                vec![
                    event.source.as_str().into(),
                    event.provider.as_str().into(),
                    event.id.as_str().into(),
                    event.kind.as_str().into(),
                    event.body.as_str().into(),
                    event.received_at.into(),
                    fault.map_or(SqlStorageValue::Null, |f| f.as_str().into()),
                ],
            )?
            .raw()
            .next()
            .transpose()?;
        Ok(inserted.is_some())
    }

    fn record_copy(&self, body: &str) -> Result<()> {
        self.ensure_table(&self.copies_table_ready, COPIES_TABLE)?;
        let (bytes, sha256) = fingerprint(body);
        self.sql.exec(
            "INSERT INTO copies (at, bytes, sha256) VALUES (?, ?, ?)",
            vec![now().into(), bytes.into(), sha256.into()],
        )?;
        Ok(())
    }

    /// The event's progress and its delivery count, without creating tables
    /// in an object that never held an event (or has forgotten it).
    fn status(&self) -> Result<Option<Status>> {
        let has_table = self
            .sql
            .exec(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'event'",
                None,
            )?
            .raw()
            .next()
            .is_some();
        if !has_table {
            return Ok(None);
        }
        // Reading the copies needs the table; an empty one changes nothing.
        self.ensure_table(&self.copies_table_ready, COPIES_TABLE)?;
        let Some(row) = json_rows::<StatusRow>(self.sql.exec(STATUS, None)?)?.pop() else {
            return Ok(None);
        };
        let (bytes, sha256) = fingerprint(&row.body);
        let first = Attempt {
            at: row.received_at,
            copy: "first".into(),
            bytes,
            sha256,
        };
        let copies: Vec<Attempt> = match row.copies {
            serde_json::Value::String(json) => serde_json::from_str(&json)?,
            other => serde_json::from_value(other)?,
        };
        let attempts: Vec<Attempt> = std::iter::once(first).chain(copies).collect();
        Ok(Some(Status {
            state: row.state,
            effect_attempts: row.effect_attempts,
            last_error: row.last_error,
            received_at: row.received_at,
            done_at: row.done_at,
            deliveries: attempts.len(),
            attempts,
        }))
    }

    fn load(&self) -> Result<Option<EventRow>> {
        Ok(json_rows(self.sql.exec(LOAD_EVENT, None)?)?.pop())
    }

    /// One try at the effect. On success marks the event done; on failure records the error and arms the next retry,
    /// or marks the event failed once the budget is spent. `None` means the
    /// effect did not commit (yet). `fault` is for tests (see [`Fault`]).
    async fn attempt_effect(
        &self,
        event: VerifiedEvent,
        fault: Option<Fault>,
        settings: &InboxSettings,
    ) -> Result<Option<Applied>> {
        let key = event.key();
        let expires_at = event.received_at + settings.retention_ms;
        self.effect_running.set(true);
        let result = self.run_effect(&event, fault).await;
        self.effect_running.set(false);
        match result {
            Ok(applied) => {
                self.sql.exec(
                    "UPDATE event SET state = 'done', done_at = ?, effect_attempts = effect_attempts + 1, last_error = NULL
                     WHERE state = 'received'",
                    vec![now().into()],
                )?;
                // The alarm armed at the claim stays: when it fires and
                // finds the event done, it re-arms for the retention
                // deadline. One storage write fewer on the reply's path.
                Ok(Some(applied))
            }
            Err(error) => {
                let failures = self.record_failure(&error)?;
                let exhausted = failures >= settings.max_attempts;
                console_error!(
                    "{}",
                    serde_json::to_string(&LogLine {
                        msg: "effect_failed",
                        key: &key,
                        attempt: Some(failures),
                        last: Some(exhausted),
                        error: &error,
                    })?
                );
                if exhausted {
                    self.sql.exec(
                        "UPDATE event SET state = 'failed' WHERE state = 'received'",
                        None,
                    )?;
                    failed_events::record(&self.env, &event, &error).await;
                    self.set_alarm_at(expires_at).await?;
                } else {
                    self.set_alarm_in(settings.backoff_ms(failures)).await?;
                }
                Ok(None)
            }
        }
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
        let plan =
            effects::plan(event, now()).map_err(|e| format!("unplannable event: {}", e.0))?;
        let db = self.env.d1(DB_BINDING).map_err(|e| e.to_string())?;
        let applied = effects::apply(&db, plan.batch)
            .await
            .map_err(|e| e.to_string())?;
        if fault == Some(Fault::FailAfterEffect) {
            return Err("injected fault: after effect committed".into());
        }
        // After the commit, never before: a message must not outrun its row.
        // Also after `Earlier`: that attempt's send may be what was lost.
        let sent = if fault == Some(Fault::FailEnqueue) {
            Err("injected fault: enqueue".into())
        } else {
            let fault = fault
                .filter(|f| *f == Fault::CrashAfterCall)
                .map(Fault::as_str);
            outbox::enqueue(&self.env, &plan.outbox_keys, fault).await
        };
        if let Err(e) = sent {
            // Nothing is lost: the rows are committed as pending, and the
            // cron relay sends them after its grace period.
            let line = LogLine {
                msg: "enqueue_failed",
                key: &event.key(),
                attempt: None,
                last: None,
                error: &e.to_string(),
            };
            console_error!("{}", serde_json::to_string(&line).unwrap_or_default());
        }
        Ok(applied)
    }

    /// Counts a failed attempt; returns the failures so far. Read back from
    /// storage, not memory: the alarm and a delivery may both have tried.
    fn record_failure(&self, error: &str) -> Result<i64> {
        let row = self
            .sql
            .exec(
                "UPDATE event SET effect_attempts = effect_attempts + 1, last_error = ?
                 RETURNING effect_attempts",
                vec![error.into()],
            )?
            .raw()
            .next()
            .transpose()?;
        match row.as_deref() {
            Some([SqlStorageValue::Integer(n)]) => Ok(*n),
            Some([SqlStorageValue::Float(n)]) => Ok(*n as i64),
            _ => Err("no event row to count a failure on".into()),
        }
    }

    async fn set_alarm_in(&self, delay_ms: i64) -> Result<()> {
        self.state.storage().set_alarm(delay_ms).await
    }

    async fn set_alarm_at(&self, at_ms: i64) -> Result<()> {
        self.set_alarm_in((at_ms - now()).max(0)).await
    }
}

/// The inbox's log lines (a failed effect attempt, a failed enqueue).
#[derive(Serialize)]
struct LogLine<'a> {
    msg: &'static str,
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<i64>,
    /// True when the retry budget is spent and the event is marked failed.
    #[serde(rename = "final", skip_serializing_if = "Option::is_none")]
    last: Option<bool>,
    error: &'a str,
}

/// Decodes the rows of a query whose one column is a `json_object(…)`.
/// Going through serde_json, which the worker needs anyway, keeps a second
/// decoder (serde-wasm-bindgen, behind `SqlCursor::to_array`) out of the wasm.
fn json_rows<T: DeserializeOwned>(cursor: SqlCursor) -> Result<Vec<T>> {
    cursor
        .raw()
        .map(|row| match row?.as_slice() {
            [SqlStorageValue::String(json)] => Ok(serde_json::from_str(json)?),
            _ => Err("expected one json_object column".into()),
        })
        .collect()
}

fn now() -> i64 {
    Date::now().as_millis() as i64
}
