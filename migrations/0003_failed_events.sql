-- Events whose effect never committed: the inbox spent its retry budget.
-- Written by the inbox when it gives up, removed when an operator's replay
-- succeeds. The operator's list of what needs attention (GET
-- /admin/api/events?status=failed).
CREATE TABLE failed_events (
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    received_at INTEGER NOT NULL,
    failed_at   INTEGER NOT NULL,
    last_error  TEXT,
    PRIMARY KEY (source, event_id)
);
