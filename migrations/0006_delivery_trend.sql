-- Deliveries per source, minute and outcome (processed, duplicate,
-- accepted, refused; failed: events that gave up), for the dashboard's
-- trend: per minute over the last hour, per hour over the last day. Added
-- to by each worker isolate every STATS_FLUSH_MS, and by the inbox when an
-- event gives up. Rows older than 25 hours are deleted as new ones are
-- added, so the table holds at most 1,500 minutes × 5 outcomes per source.
-- Telemetry, not truth: the ledger is the truth.
CREATE TABLE delivery_trend (
    minute  INTEGER NOT NULL,   -- minutes since the Unix epoch, UTC
    source  TEXT    NOT NULL,
    outcome TEXT    NOT NULL,
    value   INTEGER NOT NULL,
    PRIMARY KEY (minute, source, outcome)
) WITHOUT ROWID;
