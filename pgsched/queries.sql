-- The only SQL the Python side sends: one-line calls of pgsched's functions.
-- Each block starts with `-- name: <name>`; queries.py loads them once.

-- name: enqueue
SELECT pgsched.enqueue(%s, %s, %s, %s, %s, %s, %s, %s, %s);

-- name: enqueue_many
-- The args travel as one JSON array (one document to encode, not one per job).
SELECT job_id FROM pgsched.enqueue_many(%s::text[], ARRAY(SELECT pg_catalog.jsonb_array_elements(%s::jsonb)),
                                        %s::text[], %s::timestamptz[], %s::integer[], %s::text[],
                                        %s::integer[], %s::text[]);

-- name: claim
SELECT id, shard, queue, task, args, attempt, max_attempts, lease_token, idempotency_key, run_at,
       priority, tenant, created_at
FROM pgsched.claim(%s, %s::text[], %s, %s::interval, %s::text[], %s);

-- name: heartbeat
SELECT job_id, held, cancel_requested FROM pgsched.heartbeat(%s::bigint[], %s::bigint[], %s::interval, %s);

-- name: complete
SELECT job_id, accepted FROM pgsched.complete(%s::bigint[], %s::bigint[], %s::jsonb[], %s::smallint[]);

-- name: fail
SELECT pgsched.fail(%s, %s, %s, %s, %s);

-- name: snooze
SELECT pgsched.snooze(%s, %s, %s);

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
