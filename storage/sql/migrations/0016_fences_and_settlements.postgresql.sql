-- A batch of journal items in one statement that also settles runs, and commits that
-- only fence. leaseward_write_journal gets a form that takes the batch's settlements (a
-- completion, a failure, a retry after a backoff): in a transaction the fence, the steps
-- and the settlements were five round trips to the server, each waiting for the event
-- loop's turn, and the last batches of a burst of runs all settle. An item renews its
-- run's lease only with lease_seconds above 0 (a third of the lease passed since the
-- last renewal); one of 0 is locked and read, not written: its run's row keeps its
-- lease, its renewals and its updated_at.
--
-- A settlement's item only fences, and its run has no other item in the batch: a row is
-- not updated twice in one statement. The settlements are fenced like the steps, on the
-- items held, and each on its own source state; one the statement does not apply as
-- sent (its run changed under its own lease) rolls it all back, and the caller writes
-- the batch in a transaction, which says whose it was.
CREATE FUNCTION leaseward_write_journal(
    p_items jsonb, p_steps jsonb, p_outcomes jsonb, p_settlements jsonb,
    p_source text, p_started text
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    held_runs jsonb;
    written bigint;
    expected bigint;
BEGIN
    WITH wanted AS (
        SELECT * FROM jsonb_to_recordset(p_items)
            AS wanted (run_id text, epoch integer, lease_seconds double precision)
    ), locked AS MATERIALIZED (
        SELECT runs.id, runs.epoch, runs.state, runs.cancel_requested,
               wanted.epoch AS wanted_epoch, wanted.lease_seconds
        FROM runs JOIN wanted ON runs.id = wanted.run_id
        ORDER BY runs.id
        FOR UPDATE OF runs
    ), renewed AS (
        UPDATE runs
        SET lease_expires_at = leaseward_clock() + locked.lease_seconds,
            lease_seconds = locked.lease_seconds, renewals = runs.renewals + 1,
            updated_at = leaseward_now()
        FROM locked
        WHERE locked.lease_seconds > 0
          AND runs.id = locked.id AND runs.epoch = locked.wanted_epoch
          AND runs.state = p_source
        RETURNING runs.id, runs.epoch, runs.cancel_requested
    ), held AS (
        SELECT id, epoch, cancel_requested FROM renewed
        UNION ALL
        SELECT id, epoch, cancel_requested FROM locked
        WHERE NOT locked.lease_seconds > 0 AND epoch = wanted_epoch AND state = p_source
    ), fresh AS (
        SELECT new.step
        FROM jsonb_array_elements(p_steps) AS new (step)
        JOIN held ON held.id = new.step ->> 0 AND held.epoch = (new.step ->> 2)::integer
    ), inserted AS (
        INSERT INTO steps (
            run_id, seq, epoch, kind, tool, call_id, effect, status, idempotency_key,
            arguments_json, output_json, error, started_at, finished_at, source_json
        )
        SELECT step ->> 0, (step ->> 1)::integer, (step ->> 2)::integer,
               step ->> 3, step ->> 4, step ->> 5, step ->> 6, step ->> 7,
               step ->> 8, step ->> 9, step ->> 10, step ->> 11,
               COALESCE((step ->> 12)::double precision, leaseward_now()),
               CASE WHEN (step ->> 13)::boolean THEN leaseward_now() END, step ->> 14
        FROM fresh
        ON CONFLICT (run_id, seq) DO NOTHING
        RETURNING 1
    ), outcomes AS (
        SELECT outcome.*
        FROM jsonb_to_recordset(p_outcomes) AS outcome (
            run_id text, seq integer, epoch integer, status text, output_json text, error text
        )
        JOIN held ON held.id = outcome.run_id AND held.epoch = outcome.epoch
    ), settled AS (
        UPDATE steps
        SET status = outcomes.status, output_json = outcomes.output_json,
            error = outcomes.error, finished_at = leaseward_now()
        FROM outcomes
        WHERE steps.run_id = outcomes.run_id AND steps.seq = outcomes.seq
          AND steps.epoch = outcomes.epoch AND steps.status = p_started
        RETURNING 1
    ), settlements AS (
        SELECT settlement.*
        FROM jsonb_to_recordset(p_settlements) AS settlement (
            run_id text, epoch integer, source text, target text, reason text,
            failure_class text, result_json text, error text, spent_retries integer,
            delay_seconds double precision, terminal boolean
        )
        JOIN held ON held.id = settlement.run_id AND held.epoch = settlement.epoch
    ), settled_runs AS (
        UPDATE runs
        SET state = settlements.target, reason = settlements.reason,
            failure_class = settlements.failure_class,
            result_json = settlements.result_json, error = settlements.error,
            requeues = runs.requeues + settlements.spent_retries,
            available_at = leaseward_now() + settlements.delay_seconds,
            lease_owner = NULL, lease_expires_at = NULL, updated_at = leaseward_now(),
            finished_at = CASE WHEN settlements.terminal THEN leaseward_now() END
        FROM settlements
        WHERE runs.id = settlements.run_id AND runs.epoch = settlements.epoch
          AND runs.state = settlements.source
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM inserted) + (SELECT count(*) FROM settled)
               + (SELECT count(*) FROM settled_runs),
           (SELECT count(*) FROM fresh) + (SELECT count(*) FROM outcomes)
               + (SELECT count(*) FROM settlements),
           (SELECT COALESCE(jsonb_agg(jsonb_build_array(id, epoch, cancel_requested)), '[]')
            FROM held)
    INTO written, expected, held_runs;
    IF written <> expected THEN
        RAISE EXCEPTION 'a journal record or a settlement was not written as sent'
            USING ERRCODE = 'unique_violation';
    END IF;
    RETURN held_runs;
END
$$;

-- The form of 0014, which older workers call (every item of theirs renews): the same
-- statement with no settlements.
CREATE OR REPLACE FUNCTION leaseward_write_journal(
    p_items jsonb, p_steps jsonb, p_outcomes jsonb, p_source text, p_started text
) RETURNS jsonb
LANGUAGE sql VOLATILE
AS $$
    SELECT leaseward_write_journal(p_items, p_steps, p_outcomes, '[]'::jsonb, p_source, p_started)
$$;
