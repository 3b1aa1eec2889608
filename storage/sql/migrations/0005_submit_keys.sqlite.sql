-- A submit retried with the same idempotency key finds the run it created
-- instead of making another. The digest of its agent and input tells a retry
-- from a key reused for other work.
ALTER TABLE runs ADD COLUMN idempotency_key TEXT;

ALTER TABLE runs ADD COLUMN request_digest TEXT;

-- The unique index is what makes two submits racing on one key create one run:
-- insert_run names it in ON CONFLICT. Partial, so runs without a key cost nothing.
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (idempotency_key)
WHERE idempotency_key IS NOT NULL;
