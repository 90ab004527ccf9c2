-- The engine's schema: the ledger, the outbox, forwarding, and what
-- operators see. A copy holds this file next to its own migrations (the
-- demo effects' tables, if kept, follow it); `make upgrade` appends the
-- engine's later files after the owner's, never renumbering one.
-- IF NOT EXISTS: a database that the template's history (0001-0011) built
-- already has all of it, and takes this file as a no-op.

-- The ledger: one row per event whose effect has committed. Its primary key
-- is what makes an effect happen once: every effect batch inserts here first,
-- and a second attempt at the same event fails on it and rolls back whole.
-- Where the signature does not cover the event id, fence_sha256 (the signed
-- content's SHA-256) is unique per source: a signed body resent under a
-- fresh id is a duplicate too.
CREATE TABLE IF NOT EXISTS processed_events (
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    received_at  INTEGER NOT NULL, -- ms since epoch, first copy's arrival
    processed_at INTEGER NOT NULL, -- ms since epoch, when the batch committed
    fence_sha256 TEXT,
    PRIMARY KEY (source, event_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS processed_events_fence ON processed_events (source, fence_sha256)
    WHERE fence_sha256 IS NOT NULL;

-- Side effects as intent, written in the effect's own transaction.
CREATE TABLE IF NOT EXISTS outbox (
    idempotency_key TEXT PRIMARY KEY,   -- sha256(source, event id, action), hex
    source          TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    action          TEXT    NOT NULL,   -- send_email, notify_chat, call_http, notify_operator
    payload         TEXT    NOT NULL,   -- JSON, what the performer needs
    status          TEXT    NOT NULL DEFAULT 'pending', -- pending | sending | sent | dead
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    note            TEXT,               -- e.g. why a send was skipped
    lease_until     INTEGER,            -- ms; while 'sending', the claim's expiry
    next_attempt_at INTEGER NOT NULL,   -- ms; when a 'pending' row is due
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    dead_lettered_at INTEGER            -- ms; when a dead row's copy reached the dead-letter queue
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS outbox_alerts ON outbox (created_at) WHERE action = 'notify_operator';
CREATE INDEX IF NOT EXISTS outbox_dead_letters ON outbox (updated_at) WHERE status = 'dead' AND dead_lettered_at IS NULL;

-- Events whose effect gave up, for operators to replay or dismiss.
CREATE TABLE IF NOT EXISTS failed_events (
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    received_at  INTEGER NOT NULL,
    failed_at    INTEGER NOT NULL,
    last_error   TEXT,
    dismissed_at INTEGER,
    PRIMARY KEY (source, event_id)
);

-- Per-source delivery counters, and their trend by minute.
CREATE TABLE IF NOT EXISTS source_counters (
    source  TEXT    NOT NULL,
    counter TEXT    NOT NULL,
    value   INTEGER NOT NULL,
    PRIMARY KEY (source, counter)
);
CREATE TABLE IF NOT EXISTS delivery_trend (
    minute  INTEGER NOT NULL,   -- minutes since the Unix epoch, UTC
    source  TEXT    NOT NULL,
    outcome TEXT    NOT NULL,
    value   INTEGER NOT NULL,
    PRIMARY KEY (minute, source, outcome)
) WITHOUT ROWID;

-- Deliveries to [vars.DESTINATIONS], one per (event, destination), and
-- each destination's circuit breaker (crates/engine/src/forward/).
CREATE TABLE IF NOT EXISTS forwards (
    delivery_id     TEXT    PRIMARY KEY, -- sha256(source, event id, "forward " + destination), hex
    source          TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    event_type      TEXT    NOT NULL,
    destination     TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending', -- pending | sending | delivered | dead
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,    -- ms; when a 'pending' row is due
    lease_until     INTEGER,             -- ms; while 'sending', the claim's expiry
    last_status     INTEGER,             -- the last attempt's HTTP status (NULL: no answer)
    last_error      TEXT,
    latency_ms      INTEGER,             -- the last attempt's
    created_at      INTEGER NOT NULL,
    budget_from     INTEGER NOT NULL,    -- ms; max_age counts from here (created, or redelivered)
    delivered_at    INTEGER,
    updated_at      INTEGER NOT NULL
) WITHOUT ROWID;
-- The cron relay's scan: unfinished rows, by destination and when they are due.
CREATE INDEX IF NOT EXISTS forwards_due ON forwards (destination, next_attempt_at) WHERE status IN ('pending', 'sending');
-- A destination's backlog, oldest first (the drain, the probes, the console).
CREATE INDEX IF NOT EXISTS forwards_by_destination ON forwards (destination, status, created_at);
-- An event's deliveries (its console page).
CREATE INDEX IF NOT EXISTS forwards_by_event ON forwards (source, event_id);

-- A destination's circuit breaker and the operators' switches. A row
-- appears with the first failure or action; no row means closed.
CREATE TABLE IF NOT EXISTS destinations (
    name        TEXT    PRIMARY KEY,
    state       TEXT    NOT NULL DEFAULT 'closed', -- closed | open | disabled (a 410)
    paused      INTEGER NOT NULL DEFAULT 0,        -- an operator's pause
    failures    INTEGER NOT NULL DEFAULT 0,        -- consecutive failed attempts
    state_since INTEGER,                           -- ms; when it last changed state
    probe_at    INTEGER,                           -- ms; open: when the next probe may go
    last_error  TEXT,
    last_error_at INTEGER,
    updated_at  INTEGER NOT NULL
) WITHOUT ROWID;
