-- The only SQL the Python side sends: one-line calls of pgsched's functions.
-- Each block starts with `-- name: <name>`; queries.py loads them once.

-- name: enqueue
-- Every parameter is cast to the type of the function's: a value out of range
-- is then refused as such, never as "function does not exist".
SELECT pgsched.enqueue(%s::text, %s::jsonb, %s::text, coalesce(%s::timestamptz, now() + %s::interval), %s::integer,
                       %s::text, %s::integer, %s::text[], %s::text, %s::interval, %s::bigint[], %s::text,
                       %s::jsonb, %s::text, %s::text, %s::text);

-- name: enqueue_command
SELECT pgsched.enqueue_command(%s::text[], %s::jsonb, %s::text, %s::interval, %s::text, %s::integer,
                               coalesce(%s::timestamptz, now() + %s::interval), %s::integer, %s::text, %s::text[],
                               %s::text, %s::integer, %s::real);

-- name: enqueue_service
SELECT pgsched.enqueue_service(%s::text, %s::jsonb, %s::text, coalesce(%s::timestamptz, now() + %s::interval),
                               %s::integer, %s::text, %s::integer, %s::text[], %s::text, %s::integer, %s::real);

-- name: enqueue_many
-- The args travel as one JSON array (one document to encode, not one per job),
-- and so do the labels, an array per job (NULL when no job has any), and the
-- dependencies (ids, and -n for the batch's n-th row). Delays
-- are added to the database's clock.
SELECT job_id FROM pgsched.enqueue_many(
    %s::text[],
    ARRAY(SELECT pg_catalog.jsonb_array_elements(%s::jsonb)),
    %s::text[],
    ARRAY(SELECT coalesce(u.r, now() + u.d)
          FROM unnest(%s::timestamptz[], %s::interval[]) WITH ORDINALITY AS u(r, d, n) ORDER BY u.n),
    %s::integer[], %s::text[], %s::integer[], %s::text[],
    (SELECT pg_catalog.array_agg(l.e ORDER BY l.n)
     FROM pg_catalog.jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS l(e, n)),
    (SELECT pg_catalog.array_agg(d.e ORDER BY d.n)
     FROM pg_catalog.jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS d(e, n)),
    %s::text[], %s::jsonb, %s::interval[], %s::text[], %s::text[]);

-- name: claim
SELECT id, shard, queue, task, args, attempt, max_attempts, lease_token, idempotency_key, run_at,
       priority, tenant, created_at, lease_expires_at, trace_context
FROM pgsched.claim(%s, %s::text[], %s, %s::interval, %s::text[], %s);

-- The claim, and in the same round trip the start of its first jobs (up to
-- at_once, of the tasks the worker knows): those that take a free handler slot at once.
-- name: claim_and_start
WITH c AS MATERIALIZED (
    SELECT id, shard, queue, task, args, attempt, max_attempts, lease_token, idempotency_key, run_at,
           priority, tenant, created_at, lease_expires_at, trace_context, pg_catalog.row_number() OVER () AS n
    FROM pgsched.claim(%(worker)s, %(queues)s::text[], %(n)s, %(lease)s::interval, %(labels)s::text[],
                       %(start_shard)s)
), s AS MATERIALIZED (
    SELECT s.job_id, s.outcome, s.timeout
    FROM pgsched.start(ARRAY(SELECT c.id FROM c WHERE c.n <= %(at_once)s AND c.task = ANY (%(tasks)s) ORDER BY c.n),
                       ARRAY(SELECT c.lease_token FROM c WHERE c.n <= %(at_once)s AND c.task = ANY (%(tasks)s)
                             ORDER BY c.n),
                       ARRAY(SELECT c.shard FROM c WHERE c.n <= %(at_once)s AND c.task = ANY (%(tasks)s)
                             ORDER BY c.n)) s
)
SELECT c.id, c.shard, c.queue, c.task, c.args, c.attempt, c.max_attempts, c.lease_token, c.idempotency_key,
       c.run_at, c.priority, c.tenant, c.created_at, c.lease_expires_at, c.trace_context, s.outcome AS started,
       extract(epoch FROM s.timeout)::float8 AS timeout
FROM c LEFT JOIN s ON s.job_id = c.id
ORDER BY c.n;

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
SELECT job_id, outcome FROM pgsched.release(%s::bigint[], %s::bigint[]);

-- name: cancel
SELECT pgsched.cancel(%s);

-- name: retry
SELECT pgsched.retry(%s);

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
-- claim index per queue (a loose index scan), whatever the backlog.
WITH RECURSIVE q AS (
    (SELECT j.queue FROM pgsched.jobs j WHERE j.state = 'available' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgsched.jobs j WHERE j.state = 'available' AND j.queue > q.queue
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
      FROM pgsched.jobs j
      LEFT JOIN pgsched.queues q ON q.name = j.queue
      WHERE j.state = 'available' AND j.queue = ANY (%s::text[])
        AND (j.labels = '{}' OR j.labels <@ %s::text[])
        AND q.paused IS NOT TRUE
      LIMIT 10000) d
GROUP BY d.queue, d.concurrency, d.key_concurrency, d.rate, d.key_rate
ORDER BY d.queue;

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

-- name: read_events
SELECT pos, id, queue, task, state, attempt, finished_at, error FROM pgsched.read_events(%s, %s);

-- The stream position just before every transaction still in flight.
-- name: events_position
SELECT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text::bigint - 1;

-- A job's active row, else its latest history row (a redriven job has several).
-- name: job_status
SELECT state, queue, task, attempt, max_attempts, result, error, finished_at FROM (
    SELECT 0 AS rank, j.state::text AS state, j.queue, j.task, j.attempt, j.max_attempts, NULL::jsonb AS result,
           j.last_error AS error, NULL::timestamptz AS finished_at
    FROM pgsched.jobs j WHERE j.id = %s
    UNION ALL
    (SELECT 1, h.state::text, h.queue, h.task, h.attempt, h.max_attempts, h.result, h.error, h.finished_at
     FROM pgsched.job_history h WHERE h.id = %s ORDER BY h.finished_at DESC LIMIT 1)
) s ORDER BY rank LIMIT 1;

-- name: task_result
-- A job as a framework's task result shows it (pgsched.contrib.django): its active row, else its latest history.
-- JSON as text: a framework's connection may load jsonb its own way (Django's leaves it a string).
SELECT state, task, args::text, attempt, worker, created_at, started_at, finished_at, result::text, error FROM (
    SELECT 0 AS rank, j.state::text AS state, j.task, j.args, j.attempt, j.leased_by AS worker, j.created_at,
           j.started_at, NULL::timestamptz AS finished_at, NULL::jsonb AS result, j.last_error AS error
    FROM pgsched.jobs j WHERE j.id = %s
    UNION ALL
    (SELECT 1, h.state::text, h.task, h.args, h.attempt, h.leased_by, h.created_at, h.started_at, h.finished_at,
            h.result, h.error
     FROM pgsched.job_history h WHERE h.id = %s ORDER BY h.finished_at DESC LIMIT 1)
) s ORDER BY rank LIMIT 1;

-- name: queue_policies
-- Each configured queue's dispatch policy (pgsched.configure_queue), durations in seconds.
SELECT q.name AS queue, q.concurrency, q.key_concurrency, q.rate, q.key_rate,
       EXTRACT(EPOCH FROM q.rate_period)::double precision AS rate_period_s,
       EXTRACT(EPOCH FROM q.aging)::double precision AS aging_s, q.tenant_fairness, q.tenant_weights, q.labels
FROM pgsched.queues q
WHERE q.concurrency IS NOT NULL OR q.key_concurrency IS NOT NULL OR q.rate IS NOT NULL OR q.key_rate IS NOT NULL
   OR q.aging IS NOT NULL OR q.tenant_fairness OR q.labels IS NOT NULL
ORDER BY q.name;

-- name: unserved_labels
-- Due jobs (of unpaused queues) whose labels no live worker of their queue
-- offers: they would wait silently. Grouped first, so the live-worker check
-- runs once per (queue, labels); unlabelled jobs are not read (a partial index).
WITH g AS (
    SELECT j.queue, j.labels, pg_catalog.count(*) AS available,
           EXTRACT(EPOCH FROM pg_catalog.now() - pg_catalog.min(j.run_at))::double precision AS oldest_due_age_s
    FROM pgsched.jobs j
    WHERE j.state = 'available' AND j.labels <> '{}'
    GROUP BY j.queue, j.labels
)
SELECT g.queue, g.labels, g.available, g.oldest_due_age_s,
       ARRAY(SELECT w.name FROM pgsched.workers_live w
             WHERE g.queue = ANY (w.queues) OR '*' = ANY (w.queues) ORDER BY w.name) AS queue_workers
FROM g
WHERE NOT EXISTS (SELECT 1 FROM pgsched.queues q WHERE q.name = g.queue AND q.paused)
  AND NOT EXISTS (SELECT 1 FROM pgsched.workers_live w
                  WHERE (g.queue = ANY (w.queues) OR '*' = ANY (w.queues)) AND g.labels <@ w.labels)
ORDER BY g.queue, g.labels;

-- name: unserved_tasks
-- Jobs a worker passed over (pgsched.pass_over) because no live worker of
-- their queue had registered their task, and still none has: how many, for
-- how long, and how long until they go dead (config.unserved_task_timeout;
-- they go dead when a worker next passes them over after it). Only such jobs
-- are read (a partial index).
WITH g AS (
    SELECT j.queue, j.task, pg_catalog.count(*) AS jobs, pg_catalog.min(j.unserved_since) AS since
    FROM pgsched.jobs j
    WHERE j.unserved_since IS NOT NULL
    GROUP BY j.queue, j.task
)
SELECT g.queue, g.task, g.jobs,
       EXTRACT(EPOCH FROM pg_catalog.now() - g.since)::double precision AS unserved_s,
       greatest(EXTRACT(EPOCH FROM g.since + c.unserved_task_timeout - pg_catalog.now()), 0)::double precision
           AS dead_in_s
FROM g CROSS JOIN pgsched.config c
WHERE NOT EXISTS (SELECT 1 FROM pgsched.workers_live w
                  WHERE (g.queue = ANY (w.queues) OR '*' = ANY (w.queues))
                    AND (w.tasks IS NULL OR g.task = ANY (w.tasks)))
ORDER BY g.queue, g.task;

-- name: worker_pools
-- Which live workers serve which labels: one row per distinct label set offered.
SELECT w.labels, pg_catalog.array_agg(w.name ORDER BY w.name) AS workers,
       pg_catalog.array_agg(DISTINCT q ORDER BY q) AS queues
FROM pgsched.workers_live w, unnest(w.queues) q
GROUP BY w.labels
ORDER BY w.labels;

-- name: report_progress
SELECT job_id, kept FROM pgsched.report_progress(%s::bigint[], %s::bigint[], %s::real[], %s::text[]);

-- name: record_step
SELECT pgsched.record_step(%s, %s, %s, %s::jsonb);

-- name: job_steps
-- The recorded steps of a job this run still holds (fenced by the token): no row when it lost the lease.
SELECT steps FROM pgsched.jobs WHERE id = %s AND shard = %s AND lease_token = %s AND state = 'running';

-- name: job_progress
-- A job's last progress report (ctx.progress) and its steps: its active row, else its latest history.
SELECT progress, progress_note, progress_at, steps FROM (
    SELECT 0 AS rank, j.progress, j.progress_note, j.progress_at, j.steps FROM pgsched.jobs j WHERE j.id = %s
    UNION ALL
    (SELECT 1, h.progress, h.progress_note, h.progress_at, h.steps
     FROM pgsched.job_history h WHERE h.id = %s ORDER BY h.finished_at DESC LIMIT 1)
) s ORDER BY rank LIMIT 1;

-- name: job_limits
-- A service job's resource limits (MiB, CPUs), read by a --pool process worker when its run starts.
SELECT memory_limit, cpu_limit FROM pgsched.jobs WHERE id = %s AND shard = %s;
-- A job's dependencies with their outcomes (ctx.dependencies).
-- name: dependency_outcomes
SELECT id, state, result, error FROM pgsched.dependency_outcomes(%s::bigint);
