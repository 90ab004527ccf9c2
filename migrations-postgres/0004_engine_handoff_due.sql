-- Releases before this one had no cap on the relay's tries, and counted
-- them during a D1 outage too: a row past the cap (10) gets one more try,
-- and is alerted if it fails. (Before the index: its lock then waits for
-- no row an older relay holds.)
UPDATE webhook_outbox SET tries = 9 WHERE handed_off_at IS NULL AND tries > 9;
-- The relay claims the rows left to hand off by how often it failed to
-- hand each off, then by age, and skips those it gave up on: this index
-- serves that order at any backlog, where the one on created_at alone made
-- each claim sort every row waiting.
CREATE INDEX IF NOT EXISTS webhook_outbox_due
    ON webhook_outbox (tries, created_at) WHERE handed_off_at IS NULL;
