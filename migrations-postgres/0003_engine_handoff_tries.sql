-- The relay counts the tries of a hand-off row D1 refused, so that such a
-- row sinks behind the others. 0001 gained this column in place after it
-- had shipped; a database that applied the earlier 0001 gets it here (a
-- no-op where 0001 already made it). Released migrations never change.
ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS tries INTEGER NOT NULL DEFAULT 0;
