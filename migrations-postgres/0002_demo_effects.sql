-- The demo effects' tables (src/effects/), as migrations/0001 made them in
-- D1: the same columns, so that each effect's SQL runs on either store.
-- needs: demos

-- needs: stripe
CREATE TABLE IF NOT EXISTS orders (
    checkout_session_id TEXT PRIMARY KEY,
    payment_intent_id   TEXT,
    status              TEXT   NOT NULL,
    amount              BIGINT,          -- minor units (cents)
    currency            TEXT,
    customer_email      TEXT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);
-- needs: stripe
CREATE INDEX IF NOT EXISTS orders_by_payment_intent
    ON orders (payment_intent_id) WHERE payment_intent_id IS NOT NULL;

-- needs: stripe
CREATE TABLE IF NOT EXISTS subscriptions (
    id            TEXT PRIMARY KEY,
    customer_id   TEXT,
    status        TEXT   NOT NULL,
    event_created BIGINT NOT NULL, -- the setting event's `created` (s)
    event_id      TEXT   NOT NULL,
    updated_at    BIGINT NOT NULL
);

-- needs: github
CREATE TABLE IF NOT EXISTS repo_stars (
    repo  TEXT PRIMARY KEY,
    stars BIGINT NOT NULL
);
