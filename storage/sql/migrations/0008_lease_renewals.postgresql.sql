-- What a reaper watches instead of a wall clock. Every claim and renewal bumps
-- renewals and records the seconds it granted. A reaper reaps a lease only once
-- it has itself seen (epoch, renewals) unchanged for lease_seconds of its own
-- monotonic time, so no step of the database host's clock (or any other) can make
-- a renewed lease look expired.
ALTER TABLE runs ADD COLUMN renewals bigint NOT NULL DEFAULT 0 CHECK (renewals >= 0);

ALTER TABLE runs ADD COLUMN lease_seconds double precision;

-- Leases granted before this version: at least what the last claim or renewal
-- granted (the expiry is dated by the statement, updated_at by its transaction).
UPDATE runs SET lease_seconds = GREATEST(lease_expires_at - updated_at, 0)
WHERE state = 'running' AND lease_expires_at IS NOT NULL;
