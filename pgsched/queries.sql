-- The only SQL the Python side sends: one-line calls of pgsched's functions.
-- Each block starts with `-- name: <name>`; queries.py loads them once.

-- name: enqueue
SELECT pgsched.enqueue(%s, %s, %s, coalesce(%s::timestamptz, now() + %s::interval), %s, %s, %s, %s, %s);

-- name: enqueue_many
-- The args travel as one JSON array (one document to encode, not one per job).
-- Delays are added to the database's clock.
SELECT job_id FROM pgsched.enqueue_many(
    %s::text[],
    ARRAY(SELECT pg_catalog.jsonb_array_elements(%s::jsonb)),
    %s::text[],
    ARRAY(SELECT coalesce(u.r, now() + u.d)
          FROM unnest(%s::timestamptz[], %s::interval[]) WITH ORDINALITY AS u(r, d, n) ORDER BY u.n),
    %s::integer[], %s::text[], %s::integer[], %s::text[]);

-- name: claim
SELECT id, shard, queue, task, args, attempt, max_attempts, lease_token, idempotency_key, run_at,
       priority, tenant, created_at
FROM pgsched.claim(%s, %s::text[], %s, %s::interval, %s::text[], %s);

-- The claim, and in the same round trip the start of its first jobs (as many as
-- the last parameters say): those that take a free handler slot at once.
-- name: claim_and_start
WITH c AS MATERIALIZED (
    SELECT id, shard, queue, task, args, attempt, max_attempts, lease_token, idempotency_key, run_at,
           priority, tenant, created_at, pg_catalog.row_number() OVER () AS n
    FROM pgsched.claim(%s, %s::text[], %s, %s::interval, %s::text[], %s)
), s AS MATERIALIZED (
    SELECT s.job_id, s.outcome
    FROM pgsched.start(ARRAY(SELECT c.id FROM c WHERE c.n <= %s ORDER BY c.n),
                       ARRAY(SELECT c.lease_token FROM c WHERE c.n <= %s ORDER BY c.n),
                       ARRAY(SELECT c.shard FROM c WHERE c.n <= %s ORDER BY c.n)) s
)
SELECT c.id, c.shard, c.queue, c.task, c.args, c.attempt, c.max_attempts, c.lease_token, c.idempotency_key,
       c.run_at, c.priority, c.tenant, c.created_at, s.outcome AS started
FROM c LEFT JOIN s ON s.job_id = c.id
ORDER BY c.n;

-- name: start
SELECT job_id, outcome FROM pgsched.start(%s::bigint[], %s::bigint[], %s::smallint[]);

-- name: cancels_requested
SELECT pgsched.cancels_requested(%s::bigint[], %s::bigint[]);

-- name: heartbeat
SELECT job_id, held, cancel_requested FROM pgsched.heartbeat(%s::bigint[], %s::bigint[], %s::interval, %s);

-- name: complete
SELECT job_id, accepted FROM pgsched.complete(%s::bigint[], %s::bigint[], %s::jsonb[], %s::smallint[]);

-- Delays are added to the database's clock, never the worker's (a NULL delay
-- means the task's backoff).
-- name: fail
SELECT pgsched.fail(%s, %s, %s, now() + %s::interval, %s);

-- name: snooze
SELECT pgsched.snooze(%s, %s, now() + %s::interval);

-- name: release
SELECT job_id, outcome FROM pgsched.release(%s::bigint[], %s::bigint[]);

-- name: cancel
SELECT pgsched.cancel(%s);

-- name: retry
SELECT pgsched.retry(%s);

-- name: promote_due
SELECT pgsched.promote_due();

-- name: expire_leases
SELECT pgsched.expire_leases();

-- name: maintain
SELECT pgsched.maintain();

-- name: register_tasks
SELECT pgsched.register_tasks(%s);

-- name: register_worker
SELECT pgsched.register_worker(%s, %s, %s, %s::text[], %s::text[], %s, %s);

-- name: unregister_worker
SELECT pgsched.unregister_worker(%s);

-- name: vacuum_candidates
SELECT schema_name, table_name, dead, live, needs_vacuum, needs_analyze FROM pgsched.vacuum_candidates(%s, %s);
