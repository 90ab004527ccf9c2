-- The operators' alerts are outbox rows (action notify_operator); the
-- dashboard lists the latest. Partial: only alert rows are indexed, so a
-- side effect's row costs no index write.
CREATE INDEX outbox_alerts ON outbox (created_at) WHERE action = 'notify_operator';
