-- What workers and scanners send to run jobs: claims, leases, outcomes, housekeeping.

-- name: claim
SELECT id, shard, queue, task, args, attempt, max_attempts, lease_token, idempotency_key, run_at,
       priority, tenant, created_at, lease_expires_at, trace_context
FROM pgsched.claim(%s, %s::text[], %s, %s::interval, %s::text[], %s);

-- The claim, which also records the start of its first jobs (as many as
-- at_once says, of the tasks this worker knows): those that take a free
-- handler slot at once. One statement, one row version per job (no start()
-- for them). The started ones come first, in claim order: the worker gives
-- them the free slots.
-- name: claim_and_start
SELECT c.id, c.shard, c.queue, c.task, c.args, c.attempt, c.max_attempts, c.lease_token, c.idempotency_key,
       c.run_at, c.priority, c.tenant, c.created_at, c.lease_expires_at, c.trace_context,
       CASE WHEN c.started_at IS NOT NULL THEN 'started' END AS started,
       extract(epoch FROM c.timeout)::float8 AS timeout
FROM pgsched.claim(%(worker)s, %(queues)s::text[], %(n)s, %(lease)s::interval, %(labels)s::text[], %(start_shard)s,
                   starts => %(at_once)s, start_tasks => %(tasks)s::text[]) WITH ORDINALITY AS c
ORDER BY c.started_at IS NULL, c.ordinality;

-- When every queue of a short claim is at its rate limit: seconds until the
-- next start is allowed (NULL: a start may be allowed now).
-- name: next_start
SELECT EXTRACT(EPOCH FROM pgsched.next_start(%s::text[]) - pg_catalog.clock_timestamp())::double precision;

-- name: start
SELECT job_id, outcome, extract(epoch FROM timeout)::float8 AS timeout
FROM pgsched.start(%s::bigint[], %s::bigint[], %s::smallint[]);

-- name: cancels_requested
SELECT pgsched.cancels_requested(%s::bigint[], %s::bigint[]);

-- name: heartbeat
SELECT job_id, held, cancel_requested FROM pgsched.heartbeat(%s::bigint[], %s::bigint[], %s::interval, %s);

-- name: complete
SELECT job_id, accepted FROM pgsched.complete(%s::bigint[], %s::bigint[], %s::jsonb[], %s::smallint[]);

-- Delays are added to the database's clock, never the worker's (a NULL delay
-- means the task's backoff). The result (JSON text or NULL) is kept with the
-- failed attempt (a command's exit code and output).
-- name: fail
SELECT pgsched.fail(%s, %s, %s, now() + %s::interval, %s, result => %s::jsonb);

-- name: snooze
SELECT pgsched.snooze(%s, %s, now() + %s::interval);

-- name: release
SELECT job_id, outcome FROM pgsched.release(%s::bigint[], %s::bigint[], ran => %s::boolean[]);

-- name: promote_due
SELECT pgsched.promote_due();

-- name: expire_leases
SELECT pgsched.expire_leases();

-- name: rollup_queue_history
SELECT pgsched.rollup_queue_history();

-- name: maintain
SELECT pgsched.maintain();

-- name: register_tasks
SELECT pgsched.register_tasks(%s);

-- name: register_worker
SELECT pgsched.register_worker(%s, %s, %s, %s::text[], %s::text[], %s, %s, %s::text[], %s);

-- Jobs of tasks this worker does not know, handed back for a worker that knows them.
-- name: pass_over
SELECT job_id, outcome FROM pgsched.pass_over(%s::bigint[], %s::bigint[]);

-- name: unregister_worker
SELECT pgsched.unregister_worker(%s);

-- name: due_queues
-- The queues that hold due jobs, for a worker serving '*': one probe of the
-- claim index (pgsched.ready's) per queue (a loose index scan), whatever the backlog.
WITH RECURSIVE q AS (
    (SELECT j.queue FROM pgsched.ready j ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgsched.ready j WHERE j.queue > q.queue
            ORDER BY j.queue LIMIT 1)
    FROM q WHERE q.queue IS NOT NULL
)
SELECT q.queue FROM q WHERE q.queue IS NOT NULL;

-- name: held_back
-- For a --burst worker whose claim came back empty: the due jobs of its
-- queues (unpaused, with labels it offers) that it may claim once a limit
-- reopens (a concurrency slot, a rate window, a per-key limit) or a claim in
-- flight commits, per queue, counted up to 10000, with the queue's limits.
SELECT d.queue, pg_catalog.count(*) AS due, d.concurrency, d.key_concurrency, d.rate, d.key_rate
FROM (SELECT j.queue, q.concurrency, q.key_concurrency, q.rate, q.key_rate
      FROM pgsched.ready j
      LEFT JOIN pgsched.queues q ON q.name = j.queue
      WHERE j.queue = ANY (%s::text[])
        AND (j.labels = '{}' OR j.labels <@ %s::text[])
        AND q.paused IS NOT TRUE
      LIMIT 10000) d
GROUP BY d.queue, d.concurrency, d.key_concurrency, d.rate, d.key_rate
ORDER BY d.queue;

-- name: vacuum_candidates
SELECT schema_name, table_name, dead, live, needs_vacuum, needs_analyze FROM pgsched.vacuum_candidates(%s, %s);

-- name: rotate_ready
-- The ring of due jobs: open the next slot, empty the drained ones (the vacuum thread, every second; four
-- times a second, with slots open a quarter second, while the xmin horizon is held).
SELECT slot, action, moved FROM pgsched.rotate_ready(%s::interval);

-- name: report_progress
SELECT job_id, kept FROM pgsched.report_progress(%s::bigint[], %s::bigint[], %s::real[], %s::text[]);

-- name: record_step
SELECT pgsched.record_step(%s, %s, %s, %s::jsonb);

-- name: job_steps
-- The recorded steps of a job this run still holds (fenced by the token): no row when it lost the lease.
SELECT steps FROM pgsched.jobs WHERE id = %s AND shard = %s AND lease_token = %s AND state = 'running';

-- name: job_limits
-- A service job's resource limits (MiB, CPUs), read by a --pool process worker when its run starts.
SELECT memory_limit, cpu_limit FROM pgsched.jobs WHERE id = %s AND shard = %s;

-- A job's dependencies with their outcomes (ctx.dependencies).
-- name: dependency_outcomes
SELECT id, state, result, error FROM pgsched.dependency_outcomes(%s::bigint);

-- name: available_queues
-- The queues with due jobs, for App.drain() without a queue list.
SELECT DISTINCT queue FROM pgsched.jobs WHERE state = 'available';

-- Shards held by lease (scanners, and workers' schedule keepers); the epoch fences a replaced owner.

-- name: acquire_shards
SELECT shard, epoch FROM pgsched.acquire_shards(%s, %s, %s, %s);

-- name: acquire_idle_shards
SELECT shard, epoch FROM pgsched.acquire_idle_shards(%s, %s);

-- name: release_shards
SELECT pgsched.release_shards(%s);

-- name: next_due
-- When each shard's next job falls due, with the database's clock to measure it against.
SELECT s, pgsched.next_due(s), clock_timestamp() FROM unnest(%s::integer[]) s;

-- name: scan_shard
SELECT expired, promoted, next_due, db_now FROM pgsched.scan_shard(%s, %s, %s);

-- name: add_occurrences
SELECT pgsched.add_occurrences(%s, %s, %s, %s, %s, %s, %s, %s);

-- name: schedule_error
SELECT pgsched.schedule_error(%s, %s, %s, %s, %s, %s);
