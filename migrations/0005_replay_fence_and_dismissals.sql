-- The fence against a signed body resent under a fresh id: the ledger keeps
-- each event's body SHA-256, unique per source, so a replayed body's effect
-- batch rolls back like any duplicate's. (Rows from before this migration
-- hold NULL, which UNIQUE lets repeat.)
ALTER TABLE processed_events ADD COLUMN body_sha256 TEXT;
CREATE UNIQUE INDEX processed_events_body ON processed_events (source, body_sha256);

-- An operator may dismiss a failed event rather than apply it. The row stays
-- as the record of that decision; the list of failures to act on leaves it out.
ALTER TABLE failed_events ADD COLUMN dismissed_at INTEGER;
