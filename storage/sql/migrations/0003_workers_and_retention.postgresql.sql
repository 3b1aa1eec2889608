-- The processes serving the queue, so that a run nobody will execute can be told
-- from one that waits its turn. Each row carries its own stale_after_seconds:
-- a reader judges liveness without knowing the worker's settings. Times are the
-- database clock's, like every lease time.
CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    agents_json TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    stale_after_seconds DOUBLE PRECISION NOT NULL CHECK (stale_after_seconds > 0)
);

-- The purge's scan: finished runs of one state, oldest first. finished_at is set
-- exactly when a run is terminal, so live runs never enter this index, and the
-- claim and reap scans keep their own partial indexes, which finished runs never
-- enter: the dead tuples a purge leaves are never on their path.
CREATE INDEX runs_finished ON runs (state, finished_at) WHERE finished_at IS NOT NULL;
