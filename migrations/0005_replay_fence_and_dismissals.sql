-- The fence against a signed body resent under a fresh id. Where the
-- signature does not cover the id (GitHub, Shopify, Linear, Twilio,
-- header-keyed HMAC), the ledger keeps the SHA-256 of what it does cover,
-- unique per source, so a replayed body's effect batch rolls back like any
-- duplicate's. NULL where the id is signed, and in rows from before this
-- migration: UNIQUE lets NULL repeat, so those bodies are not fenced.
ALTER TABLE processed_events ADD COLUMN fence_sha256 TEXT;
CREATE UNIQUE INDEX processed_events_fence ON processed_events (source, fence_sha256);

-- An operator may dismiss a failed event rather than apply it. The row stays
-- as the record of that decision (and a ledger row marks the event handled);
-- the list of failures to act on leaves it out.
ALTER TABLE failed_events ADD COLUMN dismissed_at INTEGER;
