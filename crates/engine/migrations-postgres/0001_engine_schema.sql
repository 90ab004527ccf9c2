-- The engine's tables in your Postgres (STORE = "postgres"; docs/postgres.md).
-- Only what must commit with an effect lives here; the engine's own
-- bookkeeping stays in D1.

-- The ledger: one row per handled event, written first in its transaction
-- (INSERT ... ON CONFLICT DO NOTHING RETURNING). A second attempt finds it
-- and rolls back. fence_sha256: the signed body where the signature does
-- not cover the id, so that a body resent under a fresh id is caught.
-- dismissed_at: an operator's decision not to apply it (its row then
-- records that the event was handled, unapplied).
CREATE TABLE IF NOT EXISTS processed_events (
    source       TEXT   NOT NULL,
    event_id     TEXT   NOT NULL,
    type         TEXT   NOT NULL,
    received_at  BIGINT NOT NULL,
    processed_at BIGINT NOT NULL,
    fence_sha256 TEXT,
    dismissed_at BIGINT,
    PRIMARY KEY (source, event_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS processed_events_fence
    ON processed_events (source, fence_sha256) WHERE fence_sha256 IS NOT NULL;

-- The outbox: what the engine's D1 needs of a committed event (its ledger
-- row, its side effects' rows, its deliveries), written in the event's
-- transaction and handed off after the commit. params: the D1 row's
-- values, a JSON array. handed_off_at: NULL until D1 has it; the cron relay
-- claims what is left with FOR UPDATE SKIP LOCKED. tries: how many times
-- the relay could not hand it off (D1 refused it), so that such a row sinks
-- behind the others.
CREATE TABLE IF NOT EXISTS webhook_outbox (
    kind          TEXT   NOT NULL CHECK (kind IN ('ledger', 'outbox', 'forwards')),
    key           TEXT   NOT NULL,
    source        TEXT   NOT NULL,
    event_id      TEXT   NOT NULL,
    params        TEXT   NOT NULL,
    created_at    BIGINT NOT NULL,
    handed_off_at BIGINT,
    tries         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, key)
);
CREATE INDEX IF NOT EXISTS webhook_outbox_waiting
    ON webhook_outbox (created_at) WHERE handed_off_at IS NULL;
CREATE INDEX IF NOT EXISTS webhook_outbox_by_event
    ON webhook_outbox (source, event_id);
