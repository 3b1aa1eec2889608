CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('queued', 'interactive')),
    state TEXT NOT NULL CHECK (state IN (
        'queued', 'running', 'waiting_for_approval', 'waiting_for_input',
        'completed', 'failed', 'cancelled', 'dead_lettered'
    )),
    reason TEXT,
    failure_class TEXT,
    input_json TEXT NOT NULL,
    result_json TEXT,
    error TEXT,
    epoch INTEGER NOT NULL CHECK (epoch >= 0),
    requeues INTEGER NOT NULL CHECK (requeues >= 0),
    lease_owner TEXT,
    lease_expires_at REAL,
    available_at REAL NOT NULL,
    cancel_requested INTEGER NOT NULL CHECK (cancel_requested IN (0, 1)),
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    finished_at REAL
);

-- Claim and reap scans read only live runs: partial indexes keep them
-- independent of how many finished runs the file holds.
CREATE INDEX runs_claimable ON runs (available_at, created_at) WHERE state = 'queued';

CREATE INDEX runs_leased ON runs (lease_expires_at) WHERE state = 'running';

CREATE INDEX runs_by_created ON runs (created_at);

CREATE TABLE steps (
    run_id TEXT NOT NULL REFERENCES runs (id),
    seq INTEGER NOT NULL CHECK (seq >= 0),
    epoch INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('provider', 'tool')),
    tool TEXT,
    call_id TEXT,
    effect TEXT CHECK (effect IN ('read_only', 'idempotent_write', 'non_idempotent_write')),
    status TEXT NOT NULL CHECK (status IN ('started', 'succeeded', 'failed')),
    idempotency_key TEXT,
    arguments_json TEXT,
    output_json TEXT,
    error TEXT,
    started_at REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
