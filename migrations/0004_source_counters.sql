-- Per-source delivery counters for operators (received, processed,
-- duplicate, accepted, rejected:<reason>), added to by each worker isolate
-- every STATS_FLUSH_MS. Telemetry, not truth: the ledger is the truth.
CREATE TABLE source_counters (
    source  TEXT    NOT NULL,
    counter TEXT    NOT NULL,
    value   INTEGER NOT NULL,
    PRIMARY KEY (source, counter)
);
