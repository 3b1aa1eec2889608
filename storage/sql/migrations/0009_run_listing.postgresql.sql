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
