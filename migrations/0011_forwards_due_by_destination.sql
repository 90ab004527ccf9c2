-- The forward relay looks its due deliveries up per destination, by due
-- time: neither a held destination's backlog (an outage's, which can run
-- to millions of rows) nor the rows still waiting for their retry are read
-- on each run, only the due rows it re-sends. Before, through an index on
-- the due time alone, every run read every due row of a destination that
-- was down. One file, one transaction: applied again, it ends the same.
DROP INDEX IF EXISTS forwards_due;
CREATE INDEX forwards_due ON forwards (destination, next_attempt_at) WHERE status IN ('pending', 'sending');
