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
-- run. Each statement that inserts, moves or deletes runs adds one row per state it
-- changed, with the change, from the rows it changed (set-based, however many runs a
-- group commit's statement carries). No row is ever updated, so concurrent workers
-- never wait on each other here; a state's count is the sum of its rows. Every so
-- many statements one writer at a time folds the rows into one per state (the others
-- skip the fold); its DELETE takes only the rows committed when it starts, so a
-- change committed meanwhile stays, and the sums stay exact.
CREATE TABLE run_counts (
    state TEXT NOT NULL,
    runs BIGINT NOT NULL
);

INSERT INTO run_counts (state, runs) SELECT state, COUNT(*) FROM runs GROUP BY state;

CREATE SEQUENCE run_count_changes;

CREATE FUNCTION leaseward_count_runs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changed_states bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO run_counts (state, runs) SELECT state, COUNT(*) FROM added GROUP BY state;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO run_counts (state, runs) SELECT state, -COUNT(*) FROM removed GROUP BY state;
    ELSE
        INSERT INTO run_counts (state, runs)
        SELECT state, SUM(change) FROM (
            SELECT state, 1 AS change FROM added
            UNION ALL
            SELECT state, -1 AS change FROM removed
        ) AS moved
        GROUP BY state
        HAVING SUM(change) <> 0;
    END IF;
    GET DIAGNOSTICS changed_states = ROW_COUNT;
    IF changed_states > 0 AND nextval('run_count_changes') % 64 = 0
       AND pg_try_advisory_xact_lock(hashtext('leaseward.run_counts')) THEN
        WITH folded AS (DELETE FROM run_counts RETURNING state, runs)
        INSERT INTO run_counts (state, runs)
        SELECT state, SUM(runs) FROM folded GROUP BY state HAVING SUM(runs) <> 0;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_counted_on_insert AFTER INSERT ON runs
REFERENCING NEW TABLE AS added
FOR EACH STATEMENT EXECUTE FUNCTION leaseward_count_runs();

CREATE TRIGGER runs_counted_on_update AFTER UPDATE ON runs
REFERENCING OLD TABLE AS removed NEW TABLE AS added
FOR EACH STATEMENT EXECUTE FUNCTION leaseward_count_runs();

CREATE TRIGGER runs_counted_on_delete AFTER DELETE ON runs
REFERENCING OLD TABLE AS removed
FOR EACH STATEMENT EXECUTE FUNCTION leaseward_count_runs();
