-- The relay claims the rows left to hand off by how often D1 refused them,
-- then by age, and skips those it gave up on (tries at the cap): this index
-- serves that order at any backlog, where the one on created_at alone made
-- each claim sort every row waiting.
CREATE INDEX IF NOT EXISTS webhook_outbox_due
    ON webhook_outbox (tries, created_at) WHERE handed_off_at IS NULL;
