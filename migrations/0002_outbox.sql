-- The outbox: side effects (emails, third-party calls) written as intent in
-- the same D1 batch as the ledger row and the business effect, then
-- performed by the queue consumer. One row per (event, action), keyed by a
-- stable idempotency key that is also sent to the third party.
CREATE TABLE outbox (
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
);
-- The cron relay's scan: due rows still pending or with an expired lease.
CREATE INDEX outbox_due ON outbox (status, next_attempt_at);
