-- Calls that wait for a person: an approval bound to one call (the provider turn
-- that asked for it, its call id, and the digest of its exact arguments), or a
-- question an agent asked (ask_human). A request is written in the transaction
-- that parks its run, and its decision in the one that requeues it.
CREATE TABLE approvals (
    run_id TEXT NOT NULL REFERENCES runs (id),
    seq INTEGER NOT NULL CHECK (seq >= 0),
    call_id TEXT NOT NULL,
    position INTEGER NOT NULL CHECK (position >= 0),
    kind TEXT NOT NULL CHECK (kind IN ('approval', 'input')),
    tool TEXT NOT NULL,
    effect TEXT NOT NULL CHECK (effect IN ('read_only', 'idempotent_write', 'non_idempotent_write')),
    arguments_json TEXT NOT NULL,
    arguments_digest TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    requested_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,
    decision TEXT CHECK (decision IN ('approved', 'rejected', 'expired', 'answered')),
    operator TEXT,
    note TEXT,
    value_json TEXT,
    decided_at DOUBLE PRECISION,
    PRIMARY KEY (run_id, seq, call_id)
);

-- The listing of what waits for a person, and the reaper's scan for expired
-- requests: decided requests never enter either index.
CREATE INDEX approvals_pending ON approvals (requested_at) WHERE decision IS NULL;

CREATE INDEX approvals_expiring ON approvals (expires_at)
WHERE decision IS NULL AND expires_at IS NOT NULL;
