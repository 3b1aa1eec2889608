-- Named queries for SQLite. Each block starts with "-- name: <name>".
-- Parameters are named (:name); the domain operations in storage/store.py
-- pass the same names to every dialect. Times are float epoch seconds: here
-- :now is the store's injected clock; the domain operations pass durations
-- (:lease_seconds, :delay_seconds) and flags, never absolute times.

-- name: insert_keys
-- The idempotency keys of new runs, from a JSON array of objects. The submit that
-- inserts a key is returned and creates its run; one whose key is already here (a
-- retry, a racing submit, an earlier run of the same batch) is not, and creates
-- nothing: the caller reads that key's run instead (get_key). The conflict target
-- is the key table's primary key. ("WHERE true" tells SQLite's parser that ON
-- CONFLICT belongs to the INSERT.)
INSERT INTO idempotency_keys (idempotency_key, run_id, agent, request_digest, created_at)
SELECT value ->> 'idempotency_key', value ->> 'id', value ->> 'agent',
       value ->> 'request_digest', :now
FROM json_each(:keys) WHERE true
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING run_id;

-- name: insert_runs
-- New runs, from a JSON array of objects; a keyed one only once insert_keys took its key.
INSERT INTO runs (
    id, agent, mode, state, input_json, epoch, requeues, lease_owner,
    lease_expires_at, lease_seconds, available_at, cancel_requested, created_at, updated_at,
    idempotency_key, request_digest, traceparent
)
SELECT value ->> 'id', value ->> 'agent', value ->> 'mode', value ->> 'state',
       value ->> 'input_json', value ->> 'epoch', 0, value ->> 'lease_owner',
       :now + (value ->> 'lease_seconds'), value ->> 'lease_seconds', :now, 0, :now, :now,
       value ->> 'idempotency_key', value ->> 'request_digest', value ->> 'traceparent'
FROM json_each(:runs)
RETURNING *;

-- name: claim_runs
-- Every claim and renewal bumps renewals: what a reaper watches (running_leases).
-- The runs are picked from the partial index of queued runs, named: it alone holds
-- them in claim order, yet without statistics the planner prefers the listing's
-- runs_by_state or runs_by_agent_state for their equality terms, and sorts. The
-- unary + keeps the outer UPDATE on the primary key, not on every run of the state.
UPDATE runs
SET state = :target, epoch = epoch + 1, lease_owner = :worker_id,
    lease_expires_at = :now + :lease_seconds, lease_seconds = :lease_seconds,
    renewals = renewals + 1, updated_at = :now
WHERE id IN (
    SELECT id FROM runs INDEXED BY runs_claimable
    WHERE state = 'queued' AND state = :source AND available_at <= :now
      AND agent IN (SELECT value FROM json_each(:agents))
      AND id NOT IN (SELECT value FROM json_each(:exclude))
    ORDER BY available_at, created_at
    LIMIT :limit
) AND +state = :source
RETURNING *;

-- name: renew_leases
-- The leases of a batch's runs that renew theirs, answered by held_leases: every
-- row a statement returns is a wait for the interpreter's lock on the connection's
-- thread, and beside a busy event loop each such wait can last the 5 ms switch
-- interval. :items is a JSON array of {run_id, epoch, lease_seconds}.
UPDATE runs
SET lease_expires_at = :now + wanted.lease_seconds, lease_seconds = wanted.lease_seconds,
    renewals = renewals + 1, updated_at = :now
FROM (
    SELECT value ->> 'run_id' AS run_id, value ->> 'epoch' AS epoch,
           value ->> 'lease_seconds' AS lease_seconds
    FROM json_each(:items)
) AS wanted
WHERE runs.id = wanted.run_id AND runs.epoch = wanted.epoch AND +runs.state = :source;

-- name: held_leases
-- A batch's fence, for all its runs at once, whether or not they renew their lease:
-- those of :items still running under their epoch, as one JSON array of
-- [run_id, epoch, cancel_requested]. The transaction holds SQLite's write lock, so
-- nothing moves them between this and the batch's other statements.
SELECT json_group_array(json_array(runs.id, runs.epoch, runs.cancel_requested)) AS held
FROM json_each(:items) AS wanted
JOIN runs ON runs.id = wanted.value ->> 'run_id'
WHERE runs.epoch = wanted.value ->> 'epoch' AND +runs.state = :source;

-- name: insert_step
-- One new journal row, run once for each row of a batch (executemany): SQLite binds
-- them in little more than half the time it takes to read them from one JSON set,
-- where each ->> of a row parses it again. A record sent again after its commit's answer was lost is
-- already here and is not inserted: the domain operation, seeing fewer rows changed
-- than sent, compares each row of the batch with the stored one.
INSERT INTO steps (
    run_id, seq, epoch, kind, tool, call_id, effect, status, idempotency_key,
    arguments_json, output_json, error, started_at, finished_at, source_json
)
VALUES (
    :run_id, :seq, :epoch, :kind, :tool, :call_id, :effect, :status, :idempotency_key,
    :arguments_json, :output_json, :error, COALESCE(:started_at, :now),
    CASE WHEN :finished THEN :now END, :source_json
)
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: settle_step
-- The outcome of one open intent, run once for each of a batch's (executemany, as
-- insert_step). One whose intent is not open changes nothing: the domain operation,
-- seeing fewer rows changed than sent, compares each of the batch with its row.
UPDATE steps
SET status = :status, output_json = :output_json, error = :error, finished_at = :now
WHERE run_id = :run_id AND seq = :seq AND epoch = :epoch AND status = :started;

-- name: insert_step_set
-- insert_step for a large batch, in one statement (see renew_leases): :steps as
-- for PostgreSQL's insert_steps. Rows already here are not inserted, and the
-- domain operation, seeing fewer rows changed than sent, compares each with its row.
INSERT INTO steps (
    run_id, seq, epoch, kind, tool, call_id, effect, status, idempotency_key,
    arguments_json, output_json, error, started_at, finished_at, source_json
)
SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5,
       value ->> 6, value ->> 7, value ->> 8, value ->> 9, value ->> 10, value ->> 11,
       COALESCE(value ->> 12, :now), CASE WHEN value ->> 13 THEN :now END, value ->> 14
FROM json_each(:steps)
-- The WHERE tells SQLite's parser that ON CONFLICT belongs to the INSERT.
WHERE true
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: settle_step_set
-- settle_step for a large batch, in one statement (see renew_leases).
UPDATE steps
SET status = outcome.value ->> 'status', output_json = outcome.value ->> 'output_json',
    error = outcome.value ->> 'error', finished_at = :now
FROM json_each(:steps) AS outcome
WHERE steps.run_id = outcome.value ->> 'run_id' AND steps.seq = outcome.value ->> 'seq'
  AND steps.epoch = outcome.value ->> 'epoch' AND steps.status = :started;

-- name: get_step
SELECT * FROM steps WHERE run_id = :run_id AND seq = :seq;

-- name: withdraw_steps
DELETE FROM steps
WHERE status = :started AND (run_id, seq, epoch) IN (
    SELECT value ->> 'run_id', value ->> 'seq', value ->> 'epoch' FROM json_each(:steps)
)
RETURNING run_id, seq;

-- name: settle_runs
-- Run settlements, each fenced on its epoch and source state; a reap's also on
-- its lease not renewed since the reaper saw it (the renewals it saw, else NULL).
-- :settlements is a JSON array of objects.
UPDATE runs
SET state = settled.target, reason = settled.reason, failure_class = settled.failure_class,
    result_json = settled.result_json, error = settled.error,
    requeues = requeues + settled.spent_retries,
    available_at = :now + settled.delay_seconds, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = :now, finished_at = CASE WHEN settled.terminal THEN :now END
FROM (
    SELECT value ->> 'run_id' AS run_id, value ->> 'epoch' AS epoch,
           value ->> 'source' AS source, value ->> 'target' AS target,
           value ->> 'reason' AS reason, value ->> 'failure_class' AS failure_class,
           value ->> 'result_json' AS result_json, value ->> 'error' AS error,
           value ->> 'spent_retries' AS spent_retries,
           value ->> 'delay_seconds' AS delay_seconds, value ->> 'terminal' AS terminal,
           value ->> 'renewals' AS renewals
    FROM json_each(:settlements)
) AS settled
WHERE runs.id = settled.run_id AND runs.epoch = settled.epoch AND runs.state = settled.source
  AND (settled.renewals IS NULL OR runs.renewals = settled.renewals)
RETURNING runs.id AS run_id, runs.epoch AS epoch;

-- name: get_run
SELECT * FROM runs WHERE id = :run_id;

-- name: read_run
-- With the store's clock, which the run's lease and retry times compare with.
SELECT *, :now AS read_at FROM runs WHERE id = :run_id;

-- name: read_runs
-- Many runs at once, those in one of :states (a caller waiting for many to finish).
SELECT *, :now AS read_at FROM runs
WHERE id IN (SELECT value FROM json_each(:run_ids))
  AND state IN (SELECT value FROM json_each(:states));

-- name: get_key
SELECT * FROM idempotency_keys WHERE idempotency_key = :idempotency_key;

-- name: purged_key
SELECT * FROM idempotency_keys WHERE run_id = :run_id AND purged_at IS NOT NULL;

-- name: lock_run
-- The transaction holds SQLite's write lock already: no other writer can interleave.
SELECT * FROM runs WHERE id = :run_id;

-- name: lock_runs
SELECT id, state FROM runs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: list_runs
-- One page of runs, newest first. The where placeholder is "WHERE" and the run_where_*
-- conditions of the filters given, joined by AND: each shape of filters is then planned
-- on its own, and uses the index that leads with its columns (a condition such as
-- "(:state IS NULL OR state = :state)" would get one plan for every shape, a scan).
-- The run's lease expiry is compared with read_at, the store's clock.
SELECT *, :now AS read_at FROM runs
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
-- Every lease a reaper watches, through the partial index of running runs, named
-- as in claim_runs. A lease granted before renewals were counted has no
-- lease_seconds: it was granted what its expiry says.
SELECT id, epoch, renewals, COALESCE(lease_seconds, lease_expires_at - updated_at) AS lease_seconds
FROM runs INDEXED BY runs_leased
WHERE state = 'running' AND state = :source;

-- name: leased_runs
-- Here and wherever runs are named by id, the unary + keeps the planner on the
-- primary key: by runs_by_state it would read every run of the state.
SELECT * FROM runs WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = :source;

-- name: cancel_runs
UPDATE runs
SET state = :target, reason = :reason, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = :now, finished_at = :now
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN (SELECT value FROM json_each(:sources));

-- name: request_cancels
UPDATE runs SET cancel_requested = 1, updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = :source;

-- name: reopen_run
UPDATE runs
SET state = :target, reason = NULL, failure_class = NULL, error = NULL,
    requeues = CASE WHEN :reset_requeues THEN 0 ELSE requeues END,
    epoch = epoch + 1, available_at = :now, lease_owner = NULL, lease_expires_at = NULL,
    cancel_requested = :keep_cancel AND cancel_requested, updated_at = :now, finished_at = NULL
WHERE id = :run_id AND epoch = :epoch AND state = :source
RETURNING *;

-- name: resolve_step
UPDATE steps
SET status = :status, output_json = :output_json, error = :error, finished_at = :now,
    resolved_by = :resolved_by, resolved_at = :now
WHERE run_id = :run_id AND seq = :seq AND status = :started
RETURNING seq;

-- name: beat_worker
-- A beat re-registers a worker whose row went missing; only a start resets started_at.
-- A draining worker's first beat as such dates its drain; a serving one has none.
INSERT INTO workers (
    id, host, pid, agents_json, started_at, heartbeat_at, stale_after_seconds, draining_since
)
VALUES (
    :id, :host, :pid, :agents_json, :now, :now, :stale_after_seconds,
    CASE WHEN :draining THEN :now END
)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, agents_json = excluded.agents_json,
    started_at = CASE WHEN :starting THEN excluded.started_at ELSE workers.started_at END,
    heartbeat_at = excluded.heartbeat_at, stale_after_seconds = excluded.stale_after_seconds,
    draining_since = CASE WHEN :draining
                          THEN coalesce(workers.draining_since, excluded.draining_since) END;

-- name: remove_worker
DELETE FROM workers WHERE id = :id;

-- name: forget_gone_workers
-- A worker killed without a word stays listed as gone, for a while: then its row goes.
DELETE FROM workers WHERE heartbeat_at + stale_after_seconds < :now - :kept_seconds;

-- name: list_workers
-- The store's "now" comes back with the rows: liveness is judged on one clock.
SELECT *, :now AS now FROM workers ORDER BY heartbeat_at DESC, id;

-- name: purge_cutoff
SELECT :now - :older_than_seconds AS cutoff;

-- name: purge_pick
-- One state at a time: an exact range of runs_finished, so a batch never walks
-- past the runs a purge keeps (dead letters, other states, newer runs).
SELECT id FROM runs
WHERE state = :state AND finished_at < :cutoff
ORDER BY finished_at
LIMIT :limit;

-- name: purge_steps
DELETE FROM steps WHERE run_id IN (SELECT value FROM json_each(:ids))
RETURNING seq;

-- name: purge_keys
-- Before the runs go: a key keeps naming its run, and keeps how it ended and when
-- it was purged. The same runs as purge_runs deletes.
UPDATE idempotency_keys
SET final_state = runs.state, final_reason = runs.reason, finished_at = runs.finished_at,
    purged_at = :now
FROM runs
WHERE runs.id IN (SELECT value FROM json_each(:ids)) AND +runs.state = :state
  AND +runs.finished_at IS NOT NULL AND idempotency_keys.run_id = runs.id;

-- name: purge_runs
-- The state is checked again: nothing but a finished run is ever deleted. The unary
-- + keeps SQLite's planner on the primary key: on runs_finished it would walk every
-- run of the state to find the few hundred ids.
DELETE FROM runs
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = :state
  AND +finished_at IS NOT NULL
RETURNING id;

-- name: purge_count
SELECT COUNT(*) AS runs,
       (SELECT COUNT(*) FROM steps WHERE run_id IN (
            SELECT id FROM runs WHERE state = :state AND finished_at < :cutoff
       )) AS steps
FROM runs
WHERE state = :state AND finished_at < :cutoff;

-- name: forget_keys
-- An operator's action, never retention's: only keys whose run is gone.
DELETE FROM idempotency_keys
WHERE idempotency_key IN (
    SELECT idempotency_key FROM idempotency_keys
    WHERE purged_at IS NOT NULL AND created_at < :cutoff
    ORDER BY created_at
    LIMIT :limit
)
RETURNING idempotency_key;

-- name: forget_count
SELECT COUNT(*) AS keys FROM idempotency_keys
WHERE purged_at IS NOT NULL AND created_at < :cutoff;

-- name: forget_count_after_purge
-- A dry run's count after a dry-run purge: the keys of the runs it would delete count
-- as purged, as they would be by the time the keys are forgotten.
SELECT COUNT(*) AS keys FROM idempotency_keys
WHERE created_at < :cutoff
  AND (purged_at IS NOT NULL OR run_id IN (
      SELECT id FROM runs
      WHERE state IN (SELECT value FROM json_each(:states)) AND finished_at < :purge_cutoff
  ));

-- name: lock_migrations
-- BEGIN IMMEDIATE already keeps a second migrator out until this one commits.
SELECT 1;

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at REAL NOT NULL
);

-- name: check_writable
-- Changes no row, yet fails on a database this connection may not write.
UPDATE runs SET epoch = epoch WHERE 0;

-- name: schema_present
SELECT EXISTS (
    SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'
) AS present;

-- name: applied_migrations
SELECT version FROM schema_migrations;

-- name: record_migration
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, :now);

-- name: insert_requests
-- Calls that wait for a person, stored with the settlement that parks their run.
-- :requests is a JSON array of objects; a NULL timeout makes a NULL expiry.
INSERT INTO approvals (
    run_id, seq, call_id, position, kind, tool, effect, arguments_json, arguments_digest,
    epoch, requested_at, expires_at
)
SELECT value ->> 'run_id', value ->> 'seq', value ->> 'call_id', value ->> 'position',
       value ->> 'kind', value ->> 'tool', value ->> 'effect', value ->> 'arguments_json',
       value ->> 'arguments_digest', value ->> 'epoch', :now,
       :now + (value ->> 'timeout_seconds')
FROM json_each(:requests);

-- name: run_requests
-- The store's "now" comes back with the rows: a request's age is read on one clock.
SELECT approvals.*, runs.agent, :now AS now
FROM approvals JOIN runs ON runs.id = approvals.run_id
WHERE approvals.run_id = :run_id
ORDER BY approvals.seq, approvals.position;

-- name: pending_requests
SELECT approvals.*, runs.agent, :now AS now
FROM approvals JOIN runs ON runs.id = approvals.run_id
WHERE approvals.decision IS NULL AND +runs.state IN (SELECT value FROM json_each(:states))
ORDER BY approvals.requested_at, approvals.run_id, approvals.seq, approvals.position
LIMIT :limit;

-- name: decide_request
-- Not once the request has expired: the exact complement of expire_requests' test,
-- on the same clock, so that of a decision and an expiry exactly one applies.
UPDATE approvals
SET decision = :decision, operator = :operator, note = :note, value_json = :value_json,
    decided_at = :now
WHERE run_id = :run_id AND seq = :seq AND call_id = :call_id AND decision IS NULL
  AND (expires_at IS NULL OR expires_at >= :now)
RETURNING seq;

-- name: requeue_decided
-- Waiting runs none of whose requests is still undecided go back to the queue,
-- ready now, under the epoch they parked with (the next claim opens a new one).
UPDATE runs SET state = :target, available_at = :now, updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = :source
  AND NOT EXISTS (
      SELECT 1 FROM approvals WHERE approvals.run_id = runs.id AND approvals.decision IS NULL
  )
RETURNING id;

-- name: expiring_runs
-- Only runs still waiting: a cancelled run's undecided requests are never expired,
-- and must not fill the batch.
SELECT DISTINCT approvals.run_id
FROM approvals JOIN runs ON runs.id = approvals.run_id
-- The partial index's own terms are written out, so that the expiring requests are
-- read from it and each run by its key, never every run of the state.
WHERE approvals.decision IS NULL AND approvals.expires_at IS NOT NULL
  AND approvals.expires_at < :now AND +runs.state = :source
LIMIT :limit;

-- name: expire_requests
-- Only requests of runs still waiting for them: a cancelled run's stay as they were.
UPDATE approvals
SET decision = :decision, note = :note, decided_at = :now
WHERE run_id IN (SELECT value FROM json_each(:ids)) AND decision IS NULL
  AND expires_at < :now
RETURNING run_id, seq, call_id, tool;

-- name: purge_approvals
DELETE FROM approvals WHERE run_id IN (SELECT value FROM json_each(:ids))
RETURNING seq;
