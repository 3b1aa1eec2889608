-- When a worker began to drain (stop claiming and let its runs reach a boundary):
-- it still beats, yet serves no new run. NULL while it serves.
ALTER TABLE workers ADD COLUMN draining_since DOUBLE PRECISION;
