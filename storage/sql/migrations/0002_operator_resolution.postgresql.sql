-- Who settled an interrupted call by hand, and when: the journal keeps the decision.
ALTER TABLE steps ADD COLUMN resolved_by TEXT;

ALTER TABLE steps ADD COLUMN resolved_at DOUBLE PRECISION;

CREATE INDEX runs_dead_letters ON runs (reason, created_at) WHERE state = 'dead_lettered';
