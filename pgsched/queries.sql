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
       priority, tenant, created_at, lease_expires_at
FROM pgsched.claim(%s, %s::text[], %s, %s::interval, %s::text[], %s);

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

-- name: due_queues
-- The queues that hold due jobs, for a worker serving '*': one probe of the
-- claim index per queue (a loose index scan), whatever the backlog.
WITH RECURSIVE q AS (
    (SELECT j.queue FROM pgsched.jobs j WHERE j.state = 'available' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgsched.jobs j WHERE j.state = 'available' AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1)
    FROM q WHERE q.queue IS NOT NULL
)
SELECT q.queue FROM q WHERE q.queue IS NOT NULL;

-- name: unserved_queues
-- Queues with due jobs that are not paused and that no live worker serves
-- (by name or by '*'), with how many jobs wait and for how long.
SELECT s.queue, s.available, s.oldest_due_age_s
FROM pgsched.queue_stats s
WHERE s.available > 0 AND NOT s.paused
  AND NOT EXISTS (SELECT 1 FROM pgsched.workers_live w WHERE s.queue = ANY (w.queues) OR '*' = ANY (w.queues))
ORDER BY s.queue;

-- name: is_known_queue
-- Whether pgsched knows queue %(q)s: configured, holding jobs or recent
-- history, named by a registered task or a schedule, or served by a live worker.
SELECT EXISTS (SELECT 1 FROM pgsched.queues q WHERE q.name = %(q)s)
    OR EXISTS (SELECT 1 FROM pgsched.tasks t WHERE t.queue = %(q)s)
    OR EXISTS (SELECT 1 FROM pgsched.schedules s WHERE s.queue = %(q)s)
    OR EXISTS (SELECT 1 FROM pgsched.workers_live w WHERE %(q)s = ANY (w.queues))
    OR EXISTS (SELECT 1 FROM pgsched.queue_stats s WHERE s.queue = %(q)s) AS known;

-- name: vacuum_candidates
SELECT schema_name, table_name, dead, live, needs_vacuum, needs_analyze FROM pgsched.vacuum_candidates(%s, %s);
