-- Rows written are most of what an event costs (BENCHMARKS.md, "What an
-- event costs"), and D1 bills each index entry as a row. A table with a
-- rowid keeps its primary key in a second b-tree, written with every
-- insert; a WITHOUT ROWID table is its primary key's b-tree. Rebuilt so:
-- the ledger (3 rows written per event -> 1, or 2 where there is a fence),
-- the orders (3 -> 2, or 1 without a payment intent) and the outbox
-- (3 -> 2 per side effect). The fence index now holds only the rows that
-- have a fence (sources whose signature does not cover the id), and the
-- payment-intent index only orders that have one: the statements that use
-- them ask for a value, never for NULL.
--
-- Each table is copied once (each row billed as written once), in the one
-- request that applies this file: the database waits meanwhile, and a
-- copy too long for D1's limit on a query fails the deploy before the
-- code is deployed. On a database with millions of rows, apply it by hand
-- at a quiet hour first. A row with no key (NULL checkout_session_id or
-- idempotency_key, which this code never writes) makes it fail: find
-- them first. Each block starts by dropping what an interrupted run of it
-- may have left, so the file can be applied again.

DROP TABLE IF EXISTS processed_events_new;
CREATE TABLE processed_events_new (
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    received_at  INTEGER NOT NULL, -- ms since epoch, first copy's arrival
    processed_at INTEGER NOT NULL, -- ms since epoch, when the batch committed
    fence_sha256 TEXT,             -- see 0005
    PRIMARY KEY (source, event_id)
) WITHOUT ROWID;
INSERT INTO processed_events_new (source, event_id, type, received_at, processed_at, fence_sha256)
    SELECT source, event_id, type, received_at, processed_at, fence_sha256 FROM processed_events;
DROP TABLE processed_events;
ALTER TABLE processed_events_new RENAME TO processed_events;
CREATE UNIQUE INDEX processed_events_fence ON processed_events (source, fence_sha256)
    WHERE fence_sha256 IS NOT NULL;

DROP TABLE IF EXISTS orders_new;
CREATE TABLE orders_new (
    checkout_session_id TEXT PRIMARY KEY,
    payment_intent_id   TEXT,
    status              TEXT    NOT NULL,
    amount              INTEGER,          -- minor units (cents)
    currency            TEXT,
    customer_email      TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO orders_new (checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at)
    SELECT checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
CREATE INDEX orders_by_payment_intent ON orders (payment_intent_id)
    WHERE payment_intent_id IS NOT NULL;

DROP TABLE IF EXISTS outbox_new;
CREATE TABLE outbox_new (
    idempotency_key TEXT PRIMARY KEY,   -- sha256(source, event id, action), hex
    source          TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    action          TEXT    NOT NULL,   -- send_receipt, notify_chat, ...
    payload         TEXT    NOT NULL,   -- JSON, what the performer needs
    status          TEXT    NOT NULL DEFAULT 'pending', -- pending | sending | sent | dead
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    note            TEXT,               -- e.g. why a send was skipped
    lease_until     INTEGER,            -- ms; while 'sending', the claim's expiry
    next_attempt_at INTEGER NOT NULL,   -- ms; when a 'pending' row is due
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO outbox_new (idempotency_key, source, event_id, action, payload, status, attempts, last_error, note, lease_until, next_attempt_at, created_at, updated_at)
    SELECT idempotency_key, source, event_id, action, payload, status, attempts, last_error, note, lease_until, next_attempt_at, created_at, updated_at FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_new RENAME TO outbox;
CREATE INDEX outbox_due ON outbox (status, next_attempt_at);
CREATE INDEX outbox_alerts ON outbox (created_at) WHERE action = 'notify_operator';
