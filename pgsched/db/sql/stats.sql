-- What the queues and the workers serving them look like: policies, pools, jobs nobody serves.

-- name: unserved_queues
-- Queues with due jobs that are not paused and that no live worker serves
-- (by name or by '*'), with how many jobs wait and for how long. A worker's
-- claim loop runs it now and then, so it reads the ring of due jobs
-- (pgsched.ready) and the workers' rows, and the due jobs of a queue nobody
-- serves: not queue_stats, which reads five minutes of history and every
-- row version of pgsched.jobs (seconds at thousands of jobs a second, more
-- while something pins the xmin horizon).
WITH served AS MATERIALIZED (
    SELECT coalesce(pg_catalog.array_agg(DISTINCT q), '{}') AS queues
    FROM pgsched.workers w CROSS JOIN LATERAL unnest(w.queues) q
    WHERE w.last_seen > pg_catalog.now() - interval '1 minute'  -- pgsched.workers_live
), waiting AS MATERIALIZED (
    SELECT r.queue, r.id, r.shard
    FROM pgsched.ready r, served s
    WHERE NOT ('*' = ANY (s.queues)) AND NOT (r.queue = ANY (s.queues))
      AND NOT EXISTS (SELECT 1 FROM pgsched.queues q WHERE q.name = r.queue AND q.paused)
)
SELECT w.queue, pg_catalog.count(*) AS available,
       EXTRACT(EPOCH FROM pg_catalog.now() - pg_catalog.min(j.run_at))::double precision AS oldest_due_age_s
FROM waiting w
CROSS JOIN LATERAL (
    -- one probe per row (LIMIT keeps it a probe), whatever the statistics say
    SELECT j.run_at FROM pgsched.jobs j
    WHERE j.id = w.id AND j.shard = w.shard AND j.state = 'available' AND j.queue = w.queue
    LIMIT 1
) j
GROUP BY w.queue
ORDER BY w.queue;

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
-- runs once per (queue, labels); unlabelled jobs are not read (a partial
-- index of pgsched.jobs on labelled due ones). It reads no unlogged table,
-- so it runs on a read replica too.
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

-- name: queue_stats
-- `pgsched stats` and `pgsched queues`: the queue_stats view, by queue.
SELECT * FROM pgsched.queue_stats ORDER BY queue;

-- name: queue_totals
-- `pgsched stats --since`: per queue over a window, from the per-minute rollup (pgsched.queue_history).
SELECT h.queue,
       pg_catalog.sum(h.completed)::bigint AS completed, pg_catalog.sum(h.failed)::bigint AS failed,
       pg_catalog.sum(h.dead)::bigint AS dead, pg_catalog.sum(h.cancelled)::bigint AS cancelled,
       pg_catalog.sum(h.retried)::bigint AS retried, pg_catalog.sum(h.expired)::bigint AS expired,
       round(pg_catalog.sum(h.completed) / (EXTRACT(EPOCH FROM %(since)s::interval) / 60), 2)::double precision
           AS completed_per_min,
       pg_catalog.max(h.lag_p95_s) AS lag_p95_max_s, pg_catalog.max(h.run_p95_s) AS run_p95_max_s,
       pg_catalog.max(h.available)::bigint AS available_max,
       pg_catalog.min(h.minute) AS first_minute, pg_catalog.max(h.minute) AS last_minute
FROM pgsched.queue_history h
WHERE h.minute >= pg_catalog.now() - %(since)s::interval
GROUP BY h.queue
ORDER BY h.queue;

-- name: workers_live
-- The live workers (`pgsched stats`, the dashboard's overview).
SELECT w.name, w.host, w.pid, w.queues, w.labels, w.concurrency, w.running, w.claimed, w.started_at, w.last_seen,
       w.seen_s_ago, w.version
FROM pgsched.workers_live w
ORDER BY w.name;

-- name: read_only_snapshot
-- The queue snapshot (metrics, the dashboard) reads its queries in one transaction of this kind.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: snapshot_queues
-- One row per queue that has jobs, recent finished work, a pgsched.queues row, or dead letters.
-- The dashboard's pages show every column; the metrics use the gauges only (windows and quantiles
-- are PromQL's to compute from the workers' counters and histograms).
SELECT coalesce(s.queue, d.queue) AS queue,
       coalesce(s.paused, false) AS paused,
       coalesce(s.scheduled, 0) AS scheduled, coalesce(s.waiting, 0) AS waiting, coalesce(s.available, 0) AS available,
       coalesce(s.running, 0) AS running, coalesce(s.claimed, 0) AS claimed, coalesce(s.retrying, 0) AS retrying,
       coalesce(s.lease_expired, 0) AS lease_expired, coalesce(s.oldest_due_age_s, 0) AS oldest_due_age_s,
       coalesce(s.completed_5m, 0) AS completed_5m, coalesce(s.dead_5m, 0) AS dead_5m,
       coalesce(s.cancelled_5m, 0) AS cancelled_5m, coalesce(s.completed_per_s, 0) AS completed_per_s,
       s.lag_p50_s, s.lag_p95_s, s.lag_p99_s,
       coalesce(d.dead_letters, 0) AS dead_letters
FROM pgsched.queue_stats s
FULL JOIN (SELECT l.queue, pg_catalog.count(*) AS dead_letters FROM pgsched.dead_letters l GROUP BY l.queue) d
    ON d.queue = s.queue
ORDER BY 1;

-- name: workers_live_count
SELECT pg_catalog.count(*) AS n FROM pgsched.workers_live;

-- name: xmin_holder
-- The oldest holder of the xmin horizon, if any: a snapshot or, idle in a transaction that wrote, an xid.
SELECT holder, pid, horizon::text AS horizon, xid_age, age_s, state, application_name
FROM pgsched.xmin_horizon()
LIMIT 1;

-- name: dead_tuples
-- Dead and live row versions per pgsched table, a partitioned table's partitions summed into one row
-- (each partition may stay under a threshold while the table holds hundreds of thousands), most dead first.
SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname) AS "table",
       pg_catalog.sum(s.n_dead_tup)::bigint AS dead, pg_catalog.sum(s.n_live_tup)::bigint AS live,
       pg_catalog.count(*) FILTER (WHERE s.relid <> c.oid)::integer AS partitions,
       pg_catalog.max(greatest(s.last_vacuum, s.last_autovacuum)) AS last_vacuum
FROM pg_catalog.pg_stat_all_tables s
JOIN pg_catalog.pg_class c ON c.oid = coalesce(pg_catalog.pg_partition_root(s.relid), s.relid)
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE s.schemaname = 'pgsched'
GROUP BY n.nspname, c.relname
ORDER BY dead DESC, 1;
