-- The operator's run listing: newest first, paged by (created_at, id), filtered by
-- state, agent, both, or mode, each alone or with a created range. Each index
-- leads with the columns a filter fixes and ends with the page order, so that a
-- page reads only its own rows, in order, however many runs the store holds.
-- Only the indexes that hold state change when a run moves: the others are
-- written when a run is created or deleted.

-- (created_at) alone cannot order runs created at the same instant by id.
DROP INDEX runs_by_created;

CREATE INDEX runs_by_created ON runs (created_at, id);

CREATE INDEX runs_by_state ON runs (state, created_at, id);

CREATE INDEX runs_by_agent ON runs (agent, created_at, id);

CREATE INDEX runs_by_agent_state ON runs (agent, state, created_at, id);

CREATE INDEX runs_by_mode ON runs (mode, created_at, id);

-- How many runs are in each state, for the runs page: counting them would read every
-- run. One row per state, kept by triggers in the transaction that inserts, moves or
-- deletes a run. SQLite has no statement triggers, so this is per run: a write to a
-- table of a few rows that stays in the page cache, and with one writer at a time
-- nothing waits on it.
CREATE TABLE run_counts (
    state TEXT PRIMARY KEY,
    runs INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO run_counts (state, runs) SELECT state, COUNT(*) FROM runs GROUP BY state;

CREATE TRIGGER runs_counted_on_insert AFTER INSERT ON runs
BEGIN
    INSERT INTO run_counts (state, runs) VALUES (new.state, 1)
    ON CONFLICT (state) DO UPDATE SET runs = runs + 1;
END;

CREATE TRIGGER runs_counted_on_move AFTER UPDATE OF state ON runs
WHEN new.state IS NOT old.state
BEGIN
    UPDATE run_counts SET runs = runs - 1 WHERE state = old.state;
    INSERT INTO run_counts (state, runs) VALUES (new.state, 1)
    ON CONFLICT (state) DO UPDATE SET runs = runs + 1;
END;

CREATE TRIGGER runs_counted_on_delete AFTER DELETE ON runs
BEGIN
    UPDATE run_counts SET runs = runs - 1 WHERE state = old.state;
END;
