-- Idempotency keys in a table of their own, which a purge does not delete: a
-- key, once used, keeps naming its run after the run is purged, so a retried
-- submit finds that run instead of making another (G11). Only an operator's
-- forget_keys deletes a key, and only one whose run is gone. run_id has no
-- foreign key for that reason. When its run is purged, the row keeps how the
-- run ended and when it was purged.
CREATE TABLE idempotency_keys (
    idempotency_key TEXT PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    agent TEXT NOT NULL,
    request_digest TEXT,
    created_at REAL NOT NULL,
    final_state TEXT,
    final_reason TEXT,
    finished_at REAL,
    purged_at REAL
) WITHOUT ROWID;

-- The keys of runs still stored. Runs purged before this version left no key to keep.
INSERT INTO idempotency_keys (idempotency_key, run_id, agent, request_digest, created_at)
SELECT idempotency_key, id, agent, request_digest, created_at
FROM runs
WHERE idempotency_key IS NOT NULL;

-- forget_keys' scan: only keys of purged runs, oldest first.
CREATE INDEX idempotency_keys_forgettable ON idempotency_keys (created_at)
WHERE purged_at IS NOT NULL;

-- The key table's primary key now decides which of two racing submits creates the run.
DROP INDEX runs_by_idempotency_key;
