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
-- `wrangler d1 migrations apply` runs this file and its d1_migrations
-- record as one transaction: all of it commits or none. (wrangler 4.86
-- sends the file plus `INSERT INTO d1_migrations (name)` as one query,
-- remotely one POST to D1's /query, locally one db.batch(); D1 "runs every
-- query inside an implicit transaction", developers.cloudflare.com/d1/
-- sql-api/foreign-keys.) Each table is copied once (each row billed as
-- written once) while the database waits, and a copy too long for D1's
-- limit on a query fails the deploy before the code is deployed: on a
-- database with millions of rows, run `make migrate STEPWISE=<this file>`
-- at a quiet hour first (docs/deploy.md, "A long migration"). A row with no key
-- (NULL checkout_session_id or idempotency_key, which this code never
-- writes) makes the copy fail: find them first.
--
-- Run statement by statement instead and stopped anywhere, it can be
-- applied again: no statement drops the only copy of a row. The pattern,
-- for any rebuild of a table x, in one paragraph (STEPWISE sends each
-- paragraph as one request, so no write lands between a copy and its
-- drop): create x_new if missing; create x if missing (a stand-in, where a
-- run dropped x and stopped before the rename, so that the copy runs);
-- copy into x_new as an upsert (a row copied before takes the values x
-- holds now, should the worker have written in between; a NULL key fails
-- where OR IGNORE would drop the row; unlike a NOT EXISTS on x_new no
-- temporary copy is made; WHERE true: the upsert needs one); drop x;
-- rename x_new to x; create its indexes if missing.
-- tests/migrations.test.mjs stops each file that drops a table after each
-- of its statements, then applies it again.

CREATE TABLE IF NOT EXISTS processed_events_new (
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    received_at  INTEGER NOT NULL, -- ms since epoch, first copy's arrival
    processed_at INTEGER NOT NULL, -- ms since epoch, when the batch committed
    fence_sha256 TEXT,             -- see 0005
    PRIMARY KEY (source, event_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS processed_events (source, event_id, type, received_at, processed_at, fence_sha256);
INSERT INTO processed_events_new (source, event_id, type, received_at, processed_at, fence_sha256)
    SELECT source, event_id, type, received_at, processed_at, fence_sha256 FROM processed_events
    WHERE true ON CONFLICT (source, event_id) DO UPDATE SET
        type = excluded.type,
        received_at = excluded.received_at,
        processed_at = excluded.processed_at,
        fence_sha256 = excluded.fence_sha256;
DROP TABLE processed_events;
ALTER TABLE processed_events_new RENAME TO processed_events;
CREATE UNIQUE INDEX IF NOT EXISTS processed_events_fence ON processed_events (source, fence_sha256)
    WHERE fence_sha256 IS NOT NULL;

CREATE TABLE IF NOT EXISTS orders_new (
    checkout_session_id TEXT PRIMARY KEY,
    payment_intent_id   TEXT,
    status              TEXT    NOT NULL,
    amount              INTEGER,          -- minor units (cents)
    currency            TEXT,
    customer_email      TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS orders (checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at);
INSERT INTO orders_new (checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at)
    SELECT checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at FROM orders
    WHERE true ON CONFLICT (checkout_session_id) DO UPDATE SET
        payment_intent_id = excluded.payment_intent_id,
        status = excluded.status,
        amount = excluded.amount,
        currency = excluded.currency,
        customer_email = excluded.customer_email,
        created_at = excluded.created_at,
        updated_at = excluded.updated_at;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
CREATE INDEX IF NOT EXISTS orders_by_payment_intent ON orders (payment_intent_id)
    WHERE payment_intent_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS outbox_new (
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
CREATE TABLE IF NOT EXISTS outbox (idempotency_key, source, event_id, action, payload, status, attempts, last_error, note, lease_until, next_attempt_at, created_at, updated_at);
INSERT INTO outbox_new (idempotency_key, source, event_id, action, payload, status, attempts, last_error, note, lease_until, next_attempt_at, created_at, updated_at)
    SELECT idempotency_key, source, event_id, action, payload, status, attempts, last_error, note, lease_until, next_attempt_at, created_at, updated_at FROM outbox
    WHERE true ON CONFLICT (idempotency_key) DO UPDATE SET
        source = excluded.source,
        event_id = excluded.event_id,
        action = excluded.action,
        payload = excluded.payload,
        status = excluded.status,
        attempts = excluded.attempts,
        last_error = excluded.last_error,
        note = excluded.note,
        lease_until = excluded.lease_until,
        next_attempt_at = excluded.next_attempt_at,
        created_at = excluded.created_at,
        updated_at = excluded.updated_at;
DROP TABLE outbox;
ALTER TABLE outbox_new RENAME TO outbox;
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS outbox_alerts ON outbox (created_at) WHERE action = 'notify_operator';
