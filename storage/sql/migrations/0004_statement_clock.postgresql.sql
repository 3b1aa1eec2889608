-- The clock of the statement, not of its transaction. A lease is granted from
-- the moment the row is written: a renewal that waited on a row lock must not
-- date the new expiry back to when its transaction began. Scans keep
-- leaseward_now(), which is stable and so usable in index conditions.
CREATE FUNCTION leaseward_clock() RETURNS double precision
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$ SELECT EXTRACT(EPOCH FROM clock_timestamp())::double precision $$;
