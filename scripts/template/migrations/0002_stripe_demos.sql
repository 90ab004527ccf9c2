-- The Stripe demo effects' tables, as the template's migrations leave them.
-- needs: stripe, demos

-- Checkouts, keyed by the Checkout Session id, so the two events of one
-- purchase cannot make two orders.
CREATE TABLE orders (
    checkout_session_id TEXT PRIMARY KEY,
    payment_intent_id   TEXT,
    status              TEXT    NOT NULL,
    amount              INTEGER,          -- minor units (cents)
    currency            TEXT,
    customer_email      TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX orders_by_payment_intent ON orders (payment_intent_id)
    WHERE payment_intent_id IS NOT NULL;

-- Subscriptions. event_created is the version: an older event never
-- overwrites a newer state.
CREATE TABLE subscriptions (
    id            TEXT PRIMARY KEY,
    customer_id   TEXT,
    status        TEXT    NOT NULL,
    event_created INTEGER NOT NULL, -- the setting event's `created` (s)
    event_id      TEXT    NOT NULL,
    updated_at    INTEGER NOT NULL
);
