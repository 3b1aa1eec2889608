-- A claim in a function whose plan is made once, for any of its arguments. As a
-- prepared statement with its LIMIT a parameter, the plan made for any value assumed
-- a tenth of the queue and joined it back to runs by a scan of the whole table, so
-- PostgreSQL planned the statement anew at every claim instead: half the server's
-- time a claim of one run. The runs picked are now looked up by id, however many are
-- asked for, and the plan is kept for the connection's life.
--
-- One statement: pick the oldest ready runs no other claimer has locked, and lease
-- them. SKIP LOCKED lets concurrent claimers take disjoint runs without waiting on
-- each other. Every claim and renewal bumps renewals: what a reaper watches
-- (running_leases). The state is written out ('queued' is Event.CLAIM's source)
-- where the runs are picked: a plan made for any value of a parameter cannot use the
-- partial index that holds only queued runs. p_exclude (the claimer's own runs, as
-- many as it has in flight) is read once into a hashed subplan; "= ANY" of the array
-- would compare each candidate with every one of them.
CREATE FUNCTION leaseward_claim_runs(
    p_agents text[], p_exclude text[], p_limit integer, p_source text, p_target text,
    p_worker_id text, p_lease_seconds double precision
) RETURNS SETOF runs
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    WITH picked AS MATERIALIZED (
        SELECT id FROM runs
        WHERE state = 'queued' AND available_at <= leaseward_now()
          AND agent = ANY(p_agents)
          AND id NOT IN (SELECT unnest(p_exclude))
        ORDER BY available_at, created_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE runs
        SET state = p_target, epoch = runs.epoch + 1, lease_owner = p_worker_id,
            lease_expires_at = leaseward_clock() + p_lease_seconds,
            lease_seconds = p_lease_seconds, renewals = runs.renewals + 1,
            updated_at = leaseward_now()
        WHERE runs.id = ANY(ARRAY(SELECT id FROM picked)) AND runs.state = p_source
        RETURNING runs.*
    )
    SELECT * FROM claimed;
END
$$;
