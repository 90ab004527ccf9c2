-- Forwarding: each verified event delivered to the destinations in
-- [vars.DESTINATIONS] (crates/engine/src/forward/). One row per (event, destination),
-- written in the event's effect batch with its ledger row, so a delivery
-- exists exactly when the event was handled. Its key is the `webhook-id`
-- the destination sees, the same on every attempt.
CREATE TABLE forwards (
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
-- The cron relay's scan: unfinished rows, by when they are due.
CREATE INDEX forwards_due ON forwards (next_attempt_at) WHERE status IN ('pending', 'sending');
-- A destination's backlog, oldest first (the drain, the probes, the console).
CREATE INDEX forwards_by_destination ON forwards (destination, status, created_at);
-- An event's deliveries (its console page).
CREATE INDEX forwards_by_event ON forwards (source, event_id);

-- A destination's circuit breaker and the operators' switches. A row
-- appears with the first failure or action; no row means closed.
CREATE TABLE destinations (
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
