-- What a reaper watches instead of a wall clock. Every claim and renewal bumps
-- renewals and records the seconds it granted. A reaper reaps a lease only once
-- it has itself seen (epoch, renewals) unchanged for lease_seconds of its own
-- monotonic time, so no clock step anywhere can make a renewed lease look expired.
ALTER TABLE runs ADD COLUMN renewals INTEGER NOT NULL DEFAULT 0 CHECK (renewals >= 0);

ALTER TABLE runs ADD COLUMN lease_seconds REAL;

-- Leases granted before this version: what the last claim or renewal granted
-- (both columns are written together with the same "now").
UPDATE runs SET lease_seconds = MAX(lease_expires_at - updated_at, 0)
WHERE state = 'running' AND lease_expires_at IS NOT NULL;
