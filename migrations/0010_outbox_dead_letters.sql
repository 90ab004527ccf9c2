-- A dead side effect's copy on the dead-letter queue. The consumer marks a
-- row dead, then sends the copy, then records it here; should the send
-- fail, the cron relay re-sends the rows still NULL, and a row recorded as
-- sent is never sent again. Rows dead before this migration count as sent:
-- their copy went out, or was lost before this column existed.
ALTER TABLE outbox ADD COLUMN dead_lettered_at INTEGER;
UPDATE outbox SET dead_lettered_at = updated_at WHERE status = 'dead';
-- The relay's scan: only dead rows whose copy is missing are indexed.
CREATE INDEX outbox_dead_letters ON outbox (updated_at) WHERE status = 'dead' AND dead_lettered_at IS NULL;
