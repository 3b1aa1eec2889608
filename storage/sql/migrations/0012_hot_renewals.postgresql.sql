-- A lease renewal writes lease_expires_at, renewals and updated_at of a running run,
-- many times a second per worker. While one of its columns is indexed, every renewal
-- adds an entry to each of the run's indexes (ten of them); with none indexed and
-- room left on the page, the new row version stays a heap-only tuple and no index is
-- written. No query searches or orders by lease_expires_at (the reaper watches
-- renewals, not the clock), and runs_by_state finds the running runs.
DROP INDEX runs_leased;

-- Room on each page for a renewed version of every row on it: a keeper's renewal
-- writes all the running runs at once, and a page's room is reused once the
-- versions the previous renewal left are dead. New pages get it; a store's existing
-- pages when they are next rewritten.
ALTER TABLE runs SET (fillfactor = 50);
