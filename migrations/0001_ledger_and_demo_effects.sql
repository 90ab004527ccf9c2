-- The ledger: one row per event whose effect has committed. Its primary key
-- is what makes an effect happen once: every effect batch inserts here first,
-- and a second attempt at the same event fails on it and rolls back whole.
CREATE TABLE processed_events (
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    received_at  INTEGER NOT NULL, -- ms since epoch, first copy's arrival
    processed_at INTEGER NOT NULL, -- ms since epoch, when the batch committed
    PRIMARY KEY (source, event_id)
);

-- Demo effect: Stripe checkouts. Keyed by the Checkout Session id, so the
-- two events of one purchase cannot make two orders.
CREATE TABLE orders (
    checkout_session_id TEXT PRIMARY KEY,
    payment_intent_id   TEXT,
    status              TEXT    NOT NULL,
    amount              INTEGER,          -- minor units (cents)
    currency            TEXT,
    customer_email      TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);
CREATE INDEX orders_by_payment_intent ON orders (payment_intent_id);

-- Demo effect: Stripe subscriptions. event_created is the version: an older
-- event never overwrites a newer state.
CREATE TABLE subscriptions (
    id            TEXT PRIMARY KEY,
    customer_id   TEXT,
    status        TEXT    NOT NULL,
    event_created INTEGER NOT NULL, -- the setting event's `created` (s)
    event_id      TEXT    NOT NULL,
    updated_at    INTEGER NOT NULL
);

-- Demo effect: GitHub stars. An increment is not idempotent by itself; the
-- ledger row in the same batch makes it exactly-once.
CREATE TABLE repo_stars (
    repo  TEXT PRIMARY KEY,
    stars INTEGER NOT NULL
);
