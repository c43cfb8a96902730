-- What the queues and the workers serving them look like: policies, pools, jobs nobody serves.

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
