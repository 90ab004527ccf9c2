-- The GitHub demo effect's table, as the template's migrations leave it.
-- needs: github, demos

-- Stars. An increment is not idempotent by itself; the ledger row in the
-- same batch makes it exactly-once.
CREATE TABLE repo_stars (
    repo  TEXT PRIMARY KEY,
    stars INTEGER NOT NULL
);
