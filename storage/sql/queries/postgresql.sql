-- Named queries for PostgreSQL. Each block starts with "-- name: <name>".
-- Parameters are named (:name) as in every dialect; the executor turns them into
-- $1, $2, ... Every time comes from the database clock, leaseward_now(), never
-- from a worker: the :now the domain operations pass is ignored here, and only
-- durations (:lease_seconds, :delay_seconds) and flags come from the caller.
-- Casts (::text, ::boolean, ...) tell the server the type of a parameter it
-- could not infer from where it stands.

-- name: insert_keys
-- The idempotency keys of new runs, from a JSON array of objects. The submit that
-- inserts a key is returned and creates its run; one whose key is already here (a
-- retry, an earlier run of the same batch) is not, and creates nothing: the caller
-- reads that key's run instead (get_key). An insert racing another with the same
-- key waits for it, then does nothing if it committed, so the key and run that
-- get_key and get_run read next are already visible.
INSERT INTO idempotency_keys (idempotency_key, run_id, agent, request_digest, created_at)
SELECT new.idempotency_key, new.id, new.agent, new.request_digest, leaseward_now()
FROM jsonb_to_recordset(:keys::jsonb) AS new (
    idempotency_key text, id text, agent text, request_digest text
)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING run_id;

-- name: insert_runs
-- New runs, from a JSON array of objects; a keyed one only once insert_keys took its key.
INSERT INTO runs (
    id, agent, mode, state, input_json, epoch, requeues, lease_owner,
    lease_expires_at, lease_seconds, available_at, cancel_requested, created_at, updated_at,
    idempotency_key, request_digest, traceparent
)
SELECT new.id, new.agent, new.mode, new.state, new.input_json, new.epoch, 0,
       new.lease_owner, leaseward_clock() + new.lease_seconds, new.lease_seconds,
       leaseward_now(), FALSE,
       leaseward_now(), leaseward_now(), new.idempotency_key, new.request_digest,
       new.traceparent
FROM jsonb_to_recordset(:runs::jsonb) AS new (
    id text, agent text, mode text, state text, input_json text, epoch integer,
    lease_owner text, lease_seconds double precision, idempotency_key text,
    request_digest text, traceparent text
)
RETURNING *;

-- name: claim_runs
-- The claim is leaseward_claim_runs (migration 17), whose plan is made once.
SELECT * FROM leaseward_claim_runs(
    :agents::text[], :exclude::text[], :limit, :source, :target, :worker_id,
    :lease_seconds::double precision
);

-- name: write_journal
-- A batch of journal items without requests or withdrawals, in one statement committed
-- on its own (see leaseward_write_journal): :items as for renew_leases, :steps as for
-- insert_steps, :outcomes as for settle_steps, :settlements as for settle_runs.
SELECT leaseward_write_journal(
    :items::jsonb, :steps::jsonb, :outcomes::jsonb, :settlements::jsonb, :source, :started
) AS held;

-- name: renew_leases
-- A batch's fence, for all its runs at once, and the renewal of the leases of the
-- items that renew theirs (lease_seconds above 0). :items is a JSON array of
-- {run_id, epoch, lease_seconds}; a run returned is held, one missing is not.
-- The rows are locked in id order first, so that two batches sharing runs (a
-- stale worker's and the new owner's) cannot deadlock. A run that only fences is
-- locked and read as its lock found it, not written.
WITH wanted AS (
    SELECT * FROM jsonb_to_recordset(:items::jsonb)
        AS wanted (run_id text, epoch integer, lease_seconds double precision)
), locked AS MATERIALIZED (
    SELECT runs.id, runs.epoch, runs.state, runs.cancel_requested,
           wanted.epoch AS wanted_epoch, wanted.lease_seconds
    FROM runs JOIN wanted ON runs.id = wanted.run_id
    ORDER BY runs.id
    FOR UPDATE OF runs
), renewed AS (
    -- Joined by id alone: matching the locked set with IN beside a second join to
    -- the JSON set made the planner filter every pair, 8M rows for 4,000 leases.
    UPDATE runs
    SET lease_expires_at = leaseward_clock() + locked.lease_seconds,
        lease_seconds = locked.lease_seconds, renewals = runs.renewals + 1,
        updated_at = leaseward_now()
    FROM locked
    WHERE locked.lease_seconds > 0
      AND runs.id = locked.id AND runs.epoch = locked.wanted_epoch AND runs.state = :source
    RETURNING runs.id AS run_id, runs.epoch, runs.cancel_requested
)
SELECT run_id, epoch, cancel_requested FROM renewed
UNION ALL
SELECT id, epoch, cancel_requested FROM locked
WHERE NOT locked.lease_seconds > 0 AND epoch = wanted_epoch AND state = :source;

-- name: renew_leases_passing_held_rows
-- The keeper's renewals: as renew_leases, except that a run whose row another
-- transaction holds (an operator's command, a session opened by hand, a worker paused
-- inside its own transaction) is not waited for but returned with busy set, for a
-- later round. Waited for, one such row held longer than the lease let every lease of
-- the worker run out, and the guard cut off each call in flight.
WITH wanted AS (
    SELECT * FROM jsonb_to_recordset(:items::jsonb)
        AS wanted (run_id text, epoch integer, lease_seconds double precision)
), locked AS MATERIALIZED (
    SELECT runs.id, wanted.epoch AS wanted_epoch, wanted.lease_seconds
    FROM runs JOIN wanted ON runs.id = wanted.run_id
    ORDER BY runs.id
    FOR UPDATE OF runs SKIP LOCKED
), renewed AS (
    UPDATE runs
    SET lease_expires_at = leaseward_clock() + locked.lease_seconds,
        lease_seconds = locked.lease_seconds, renewals = runs.renewals + 1,
        updated_at = leaseward_now()
    FROM locked
    WHERE runs.id = locked.id AND runs.epoch = locked.wanted_epoch AND runs.state = :source
    RETURNING runs.id AS run_id, runs.epoch, runs.cancel_requested
)
SELECT run_id, epoch, cancel_requested, FALSE AS busy FROM renewed
UNION ALL
-- Skipped, yet there: held by another transaction. A run gone is not held at all.
SELECT wanted.run_id, wanted.epoch, FALSE, TRUE FROM wanted
WHERE NOT EXISTS (SELECT 1 FROM locked WHERE locked.id = wanted.run_id)
  AND EXISTS (SELECT 1 FROM runs WHERE runs.id = wanted.run_id);

-- name: insert_steps
-- Every new journal row of a batch. :steps is a JSON array of arrays, each
-- [run_id, seq, epoch, kind, tool, call_id, effect, status, idempotency_key,
-- arguments_json, output_json, error, started_at, finished, source_json] (positions, not keys:
-- this is the statement that carries every row). A record sent again after its
-- commit's answer was lost is already here and is not returned: the domain
-- operation compares it with the stored row.
INSERT INTO steps (
    run_id, seq, epoch, kind, tool, call_id, effect, status, idempotency_key,
    arguments_json, output_json, error, started_at, finished_at, source_json
)
SELECT new.step ->> 0, (new.step ->> 1)::integer, (new.step ->> 2)::integer,
       new.step ->> 3, new.step ->> 4, new.step ->> 5, new.step ->> 6, new.step ->> 7,
       new.step ->> 8, new.step ->> 9, new.step ->> 10, new.step ->> 11,
       COALESCE((new.step ->> 12)::double precision, leaseward_now()),
       CASE WHEN (new.step ->> 13)::boolean THEN leaseward_now() END, new.step ->> 14
FROM jsonb_array_elements(:steps::jsonb) AS new (step)
ON CONFLICT (run_id, seq) DO NOTHING
RETURNING run_id, seq;

-- name: settle_steps
-- The outcomes of open intents; one whose intent is not open is not returned.
UPDATE steps
SET status = outcome.status, output_json = outcome.output_json, error = outcome.error,
    finished_at = leaseward_now()
FROM jsonb_to_recordset(:steps::jsonb) AS outcome (
    run_id text, seq integer, epoch integer, status text, output_json text, error text
)
WHERE steps.run_id = outcome.run_id AND steps.seq = outcome.seq
  AND steps.epoch = outcome.epoch AND steps.status = :started
RETURNING steps.run_id, steps.seq;

-- name: get_step
SELECT * FROM steps WHERE run_id = :run_id AND seq = :seq;

-- name: withdraw_steps
DELETE FROM steps
WHERE status = :started AND (run_id, seq, epoch) IN (
    SELECT * FROM jsonb_to_recordset(:steps::jsonb)
        AS withdrawn (run_id text, seq integer, epoch integer)
)
RETURNING run_id, seq;

-- name: settle_runs
-- Run settlements, each fenced on its epoch and source state; a reap's also on
-- its lease not renewed since the reaper saw it (the renewals it saw, else NULL).
-- :settlements is a JSON array of objects.
UPDATE runs
SET state = settled.target, reason = settled.reason, failure_class = settled.failure_class,
    result_json = settled.result_json, error = settled.error,
    requeues = runs.requeues + settled.spent_retries,
    available_at = leaseward_now() + settled.delay_seconds,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = leaseward_now(),
    finished_at = CASE WHEN settled.terminal THEN leaseward_now() END
FROM jsonb_to_recordset(:settlements::jsonb) AS settled (
    run_id text, epoch integer, source text, target text, reason text,
    failure_class text, result_json text, error text, spent_retries integer,
    delay_seconds double precision, terminal boolean, renewals bigint
)
WHERE runs.id = settled.run_id AND runs.epoch = settled.epoch AND runs.state = settled.source
  AND (settled.renewals IS NULL OR runs.renewals = settled.renewals)
RETURNING runs.id AS run_id, runs.epoch;

-- name: get_run
SELECT * FROM runs WHERE id = :run_id;

-- name: read_run
-- With the store's clock, which the run's lease and retry times compare with.
SELECT *, leaseward_now() AS read_at FROM runs WHERE id = :run_id;

-- name: read_runs
-- Many runs at once, those in one of :states (a caller waiting for many to finish).
SELECT *, leaseward_now() AS read_at FROM runs
WHERE id = ANY(:run_ids::text[]) AND state = ANY(:states::text[]);

-- name: get_key
SELECT * FROM idempotency_keys WHERE idempotency_key = :idempotency_key;

-- name: purged_key
SELECT * FROM idempotency_keys WHERE run_id = :run_id AND purged_at IS NOT NULL;

-- name: lock_run
-- Held until the transaction ends: the decision taken on this row stays true.
SELECT * FROM runs WHERE id = :run_id FOR UPDATE;

-- name: lock_runs
SELECT id, state FROM runs WHERE id = ANY(:ids::text[]) ORDER BY id FOR UPDATE;

-- name: list_runs
-- One page of runs, newest first. The where placeholder is "WHERE" and the run_where_*
-- conditions of the filters given, joined by AND: each shape of filters is then planned
-- on its own, and uses the index that leads with its columns (a condition such as
-- "(:state IS NULL OR state = :state)" would get one plan for every shape, a scan).
-- The run's lease expiry is compared with read_at, the store's clock.
SELECT *, leaseward_now() AS read_at FROM runs
{where}
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: run_where_state
state = :state;

-- name: run_where_agent
agent = :agent;

-- name: run_where_reason
reason = :reason;

-- name: run_where_mode
mode = :mode;

-- name: run_where_created_after
created_at >= :created_after;

-- name: run_where_created_before
created_at < :created_before;

-- name: run_where_search
-- A run id or an idempotency key, each found through its primary key.
id IN (:search_id, (SELECT run_id FROM idempotency_keys WHERE idempotency_key = :search));

-- name: run_where_after_cursor
-- Strictly after the previous page's last run, in the order of the page.
(created_at, id) < (:after_created_at, :after_id);

-- name: count_runs
-- From the counts the writes keep (migration 9), not from the runs.
SELECT state, SUM(runs) AS runs FROM run_counts GROUP BY state HAVING SUM(runs) <> 0;

-- name: list_steps
SELECT * FROM steps WHERE run_id = :run_id ORDER BY seq;

-- name: last_step
SELECT * FROM steps WHERE run_id = :run_id ORDER BY seq DESC LIMIT 1;

-- name: running_leases
-- Every lease a reaper watches. 'running' written out, as in claim_runs, so that
-- a generic plan can use the index of runs by state. A lease granted before
-- renewals were counted has no lease_seconds: it was granted what its expiry says.
SELECT id, epoch, renewals,
       COALESCE(lease_seconds, lease_expires_at - updated_at) AS lease_seconds
FROM runs
WHERE state = 'running';

-- name: leased_runs
SELECT * FROM runs WHERE id = ANY(:ids::text[]) AND state = :source;

-- name: cancel_runs
UPDATE runs
SET state = :target, reason = :reason, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = leaseward_now(), finished_at = leaseward_now()
WHERE id = ANY(:ids::text[]) AND state = ANY(:sources::text[]);

-- name: request_cancels
UPDATE runs SET cancel_requested = TRUE, updated_at = leaseward_now()
WHERE id = ANY(:ids::text[]) AND state = :source;

-- name: reopen_run
UPDATE runs
SET state = :target, reason = NULL, failure_class = NULL, error = NULL,
    requeues = CASE WHEN :reset_requeues::boolean THEN 0 ELSE requeues END,
    epoch = epoch + 1, available_at = leaseward_now(), lease_owner = NULL,
    lease_expires_at = NULL, cancel_requested = :keep_cancel::boolean AND cancel_requested,
    updated_at = leaseward_now(),
    finished_at = NULL
WHERE id = :run_id AND epoch = :epoch AND state = :source
RETURNING *;

-- name: resolve_step
UPDATE steps
SET status = :status, output_json = :output_json, error = :error,
    finished_at = leaseward_now(), resolved_by = :resolved_by, resolved_at = leaseward_now()
WHERE run_id = :run_id AND seq = :seq AND status = :started
RETURNING seq;

-- name: beat_worker
-- A beat re-registers a worker whose row went missing; only a start resets started_at.
-- A draining worker's first beat as such dates its drain; a serving one has none.
INSERT INTO workers (
    id, host, pid, agents_json, started_at, heartbeat_at, stale_after_seconds, draining_since
)
VALUES (:id, :host, :pid, :agents_json, leaseward_now(), leaseward_now(),
        :stale_after_seconds::double precision,
        CASE WHEN :draining::boolean THEN leaseward_now() END)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, agents_json = excluded.agents_json,
    started_at = CASE WHEN :starting::boolean THEN excluded.started_at
                      ELSE workers.started_at END,
    heartbeat_at = excluded.heartbeat_at, stale_after_seconds = excluded.stale_after_seconds,
    draining_since = CASE WHEN :draining::boolean
                          THEN coalesce(workers.draining_since, excluded.draining_since) END;

-- name: remove_worker
DELETE FROM workers WHERE id = :id;

-- name: forget_gone_workers
-- A worker killed without a word stays listed as gone, for a while: then its row goes.
DELETE FROM workers WHERE heartbeat_at + stale_after_seconds < leaseward_now() - :kept_seconds::double precision;

-- name: list_workers
-- The database clock comes back with the rows: liveness is judged on one clock.
SELECT *, leaseward_now() AS now FROM workers ORDER BY heartbeat_at DESC, id;

-- name: purge_cutoff
SELECT leaseward_now() - :older_than_seconds::double precision AS cutoff;

-- name: purge_pick
-- One state at a time: an exact range of runs_finished, so a batch never walks
-- past the runs a purge keeps (dead letters, other states, newer runs). Locked
-- until the batch commits: an operator's redrive of one of them waits, then finds
-- it gone; a concurrent purge skips it.
SELECT id FROM runs
WHERE state = :state AND finished_at < :cutoff::double precision
ORDER BY finished_at
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: purge_steps
DELETE FROM steps WHERE run_id = ANY(:ids::text[])
RETURNING seq;

-- name: purge_keys
-- Before the runs go: a key keeps naming its run, and keeps how it ended and when
-- it was purged. The same runs as purge_runs deletes (purge_pick locked them).
UPDATE idempotency_keys
SET final_state = runs.state, final_reason = runs.reason, finished_at = runs.finished_at,
    purged_at = leaseward_now()
FROM runs
WHERE runs.id = ANY(:ids::text[]) AND runs.state = :state AND runs.finished_at IS NOT NULL
  AND idempotency_keys.run_id = runs.id;

-- name: purge_runs
-- The state is checked again: nothing but a finished run is ever deleted.
DELETE FROM runs
WHERE id = ANY(:ids::text[]) AND state = :state AND finished_at IS NOT NULL
RETURNING id;

-- name: purge_count
SELECT COUNT(*) AS runs,
       (SELECT COUNT(*) FROM steps WHERE run_id IN (
            SELECT id FROM runs
            WHERE state = :state AND finished_at < :cutoff::double precision
       )) AS steps
FROM runs
WHERE state = :state AND finished_at < :cutoff::double precision;

-- name: forget_keys
-- An operator's action, never retention's: only keys whose run is gone. A
-- concurrent forget skips the keys this one took.
WITH picked AS MATERIALIZED (
    SELECT idempotency_key FROM idempotency_keys
    WHERE purged_at IS NOT NULL AND created_at < :cutoff::double precision
    ORDER BY created_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys USING picked
WHERE idempotency_keys.idempotency_key = picked.idempotency_key
RETURNING idempotency_keys.idempotency_key;

-- name: forget_count
SELECT COUNT(*) AS keys FROM idempotency_keys
WHERE purged_at IS NOT NULL AND created_at < :cutoff::double precision;

-- name: forget_count_after_purge
-- A dry run's count after a dry-run purge: the keys of the runs it would delete count
-- as purged, as they would be by the time the keys are forgotten.
SELECT COUNT(*) AS keys FROM idempotency_keys
WHERE created_at < :cutoff::double precision
  AND (purged_at IS NOT NULL OR run_id IN (
      SELECT id FROM runs
      WHERE state = ANY(:states::text[]) AND finished_at < :purge_cutoff::double precision
  ));

-- name: lock_migrations
-- Held until the migrating transaction ends: a second migrator waits here, then
-- finds the schema current. The key is the text's hash, fixed across versions.
SELECT pg_advisory_xact_lock(hashtext('leaseward.schema_migrations'));

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL
);

-- name: check_writable
-- Changes no row, yet fails in a read-only session or without the UPDATE privilege.
UPDATE runs SET epoch = epoch WHERE false;

-- name: schema_present
SELECT to_regclass('schema_migrations') IS NOT NULL AS present;

-- name: applied_migrations
SELECT version FROM schema_migrations;

-- name: record_migration
INSERT INTO schema_migrations (version, name, applied_at)
VALUES (:version, :name, EXTRACT(EPOCH FROM now())::double precision);

-- name: insert_requests
-- Calls that wait for a person, stored with the settlement that parks their run.
-- :requests is a JSON array of objects; a NULL timeout makes a NULL expiry.
INSERT INTO approvals (
    run_id, seq, call_id, position, kind, tool, effect, arguments_json, arguments_digest,
    epoch, requested_at, expires_at
)
SELECT r.run_id, r.seq, r.call_id, r.position, r.kind, r.tool, r.effect, r.arguments_json,
       r.arguments_digest, r.epoch, leaseward_now(), leaseward_now() + r.timeout_seconds
FROM jsonb_to_recordset(:requests::jsonb) AS r (
    run_id text, seq integer, call_id text, position integer, kind text, tool text,
    effect text, arguments_json text, arguments_digest text, epoch integer,
    timeout_seconds double precision
);

-- name: run_requests
-- The database clock comes back with the rows: a request's age is read on one clock.
SELECT approvals.*, runs.agent, leaseward_now() AS now
FROM approvals JOIN runs ON runs.id = approvals.run_id
WHERE approvals.run_id = :run_id
ORDER BY approvals.seq, approvals.position;

-- name: pending_requests
SELECT approvals.*, runs.agent, leaseward_now() AS now
FROM approvals JOIN runs ON runs.id = approvals.run_id
WHERE approvals.decision IS NULL AND runs.state = ANY(:states::text[])
ORDER BY approvals.requested_at, approvals.run_id, approvals.seq, approvals.position
LIMIT :limit;

-- name: decide_request
-- Not once the request has expired: the exact complement of expire_requests' test,
-- on the same clock, so that of a decision and an expiry exactly one applies.
UPDATE approvals
SET decision = :decision, operator = :operator, note = :note, value_json = :value_json,
    decided_at = leaseward_now()
WHERE run_id = :run_id AND seq = :seq AND call_id = :call_id AND decision IS NULL
  AND (expires_at IS NULL OR expires_at >= leaseward_now())
RETURNING seq;

-- name: requeue_decided
-- Waiting runs none of whose requests is still undecided go back to the queue,
-- ready now, under the epoch they parked with (the next claim opens a new one).
UPDATE runs SET state = :target, available_at = leaseward_now(), updated_at = leaseward_now()
WHERE id = ANY(:ids::text[]) AND state = :source
  AND NOT EXISTS (
      SELECT 1 FROM approvals WHERE approvals.run_id = runs.id AND approvals.decision IS NULL
  )
RETURNING id;

-- name: expiring_runs
-- Read without locks: the runs are locked next, always before their requests, in
-- the order every other writer locks them.
-- Only runs still waiting: a cancelled run's undecided requests are never expired,
-- and must not fill the batch.
SELECT DISTINCT approvals.run_id
FROM approvals JOIN runs ON runs.id = approvals.run_id
WHERE approvals.decision IS NULL AND approvals.expires_at < leaseward_now() AND runs.state = :source
LIMIT :limit;

-- name: expire_requests
-- Only requests of runs still waiting for them: a cancelled run's stay as they were.
UPDATE approvals
SET decision = :decision, note = :note, decided_at = leaseward_now()
WHERE run_id = ANY(:ids::text[]) AND decision IS NULL AND expires_at < leaseward_now()
RETURNING run_id, seq, call_id, tool;

-- name: purge_approvals
DELETE FROM approvals WHERE run_id = ANY(:ids::text[])
RETURNING seq;
