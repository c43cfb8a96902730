-- The dashboard's pages (pgsched.dashboard.queries.Store); the queries it shares with the CLI
-- (workers_live, job_timeline, schedule_status, cancel_job, ...) are in the files of their concern.

-- name: dashboard_scanners
SELECT s.name, s.host, s.pid, s.started_at, s.last_seen,
       EXTRACT(EPOCH FROM pg_catalog.now() - s.last_seen)::double precision AS seen_s_ago,
       (SELECT pg_catalog.count(*) FROM pgsched.shard_leases l
        WHERE l.owner = s.name AND l.expires_at > pg_catalog.now()) AS shards
FROM pgsched.scanners s
ORDER BY s.name;

-- name: dashboard_shard_leases
SELECT l.shard, l.owner, l.epoch, l.expires_at, l.renewed_at,
       EXTRACT(EPOCH FROM l.expires_at - pg_catalog.now())::double precision AS expires_in_s
FROM pgsched.shard_leases l
ORDER BY l.shard;

-- name: dashboard_queue_jobs
-- One page of a queue's jobs, newest id first: active rows, and each finished
-- job's latest history row (a redriven job has several; an active one none).
WITH active AS (
    SELECT j.id, j.state::text AS state, j.task, pg_catalog.left(j.args::text, 160) AS args, j.priority,
           j.attempt, j.max_attempts, j.run_at, j.leased_by AS worker, j.last_error AS error,
           j.created_at, NULL::timestamptz AS finished_at, j.progress, j.progress_note,
           CASE WHEN j.state = 'running' THEN
               EXTRACT(EPOCH FROM pg_catalog.now() - coalesce(j.started_at, j.claimed_at))::double precision
           END AS elapsed_s
    FROM pgsched.jobs j
    WHERE j.queue = %(queue)s
      AND (%(state)s::text IS NULL OR j.state::text = %(state)s::text)
      AND (%(state)s::text IS NULL OR %(state)s::text IN ('scheduled', 'waiting', 'available', 'running'))
      AND (%(before)s::bigint IS NULL OR j.id < %(before)s::bigint)
    ORDER BY j.id DESC
    LIMIT %(limit)s
), finished AS (
    SELECT h.id, h.state::text AS state, h.task, pg_catalog.left(h.args::text, 160) AS args, h.priority,
           h.attempt, h.max_attempts, h.run_at, h.leased_by AS worker, h.error, h.created_at, h.finished_at,
           h.progress, h.progress_note, NULL::double precision AS elapsed_s
    FROM pgsched.job_history h
    WHERE h.queue = %(queue)s
      AND (%(state)s::text IS NULL OR h.state::text = %(state)s::text)
      AND (%(state)s::text IS NULL OR %(state)s::text IN ('completed', 'dead', 'cancelled'))
      AND (%(before)s::bigint IS NULL OR h.id < %(before)s::bigint)
      AND NOT EXISTS (SELECT 1 FROM pgsched.job_history n WHERE n.id = h.id AND n.finished_at > h.finished_at)
      AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
    ORDER BY h.id DESC
    LIMIT %(limit)s
)
SELECT * FROM active
UNION ALL
SELECT * FROM finished
ORDER BY id DESC
LIMIT %(limit)s;

-- name: dashboard_job_runs
-- Earlier runs of a redriven job (every history row), newest first.
SELECT h.state::text AS state, h.attempt, h.started_at, h.finished_at, h.leased_by AS worker, h.error
FROM pgsched.job_history h
WHERE h.id = %(id)s
ORDER BY h.finished_at DESC;

-- name: dashboard_dead_letters
SELECT d.id, d.queue, d.task, pg_catalog.left(d.args::text, 160) AS args, d.attempt, d.max_attempts, d.error,
       d.died_at, d.last_worker
FROM pgsched.dead_letters d
WHERE (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
  AND (%(before)s::bigint IS NULL OR d.id < %(before)s::bigint)
ORDER BY d.id DESC
LIMIT %(limit)s;

-- name: dashboard_dead_letter_counts
SELECT d.queue, pg_catalog.count(*) AS n FROM pgsched.dead_letters d GROUP BY d.queue ORDER BY d.queue;

-- name: dashboard_occurrences
SELECT o.schedule, o.fire_at, o.nominal, o.dst, o.decision, o.reason, o.job_id, o.version, o.decided_at
FROM pgsched.schedule_occurrences o
WHERE %(schedule)s::text IS NULL OR o.schedule = %(schedule)s::text
ORDER BY o.decided_at DESC, o.fire_at DESC
LIMIT %(limit)s;

-- name: dashboard_history
-- Charts: the per-minute rollup (pgsched.queue_history) of one queue or of all
-- of them, in buckets of %(bucket)s over the last %(window)s. Counts add up;
-- depth is the largest sampled in the bucket; lag and run time percentiles the
-- worst of the bucket (percentiles of different minutes do not add up). The
-- first bucket is the oldest of the window's whole ones, as charts.buckets lays them.
WITH minutes AS (
    SELECT h.minute,
           pg_catalog.sum(h.completed) AS completed, pg_catalog.sum(h.failed) AS failed,
           pg_catalog.sum(h.dead) AS dead, pg_catalog.sum(h.expired) AS expired,
           pg_catalog.sum(h.cancelled) AS cancelled,
           pg_catalog.sum(h.available) AS available, pg_catalog.sum(h.running) AS running,
           pg_catalog.sum(h.scheduled) AS scheduled,
           pg_catalog.max(h.lag_p50_s) AS lag_p50_s, pg_catalog.max(h.lag_p95_s) AS lag_p95_s,
           pg_catalog.max(h.run_p95_s) AS run_p95_s
    FROM pgsched.queue_history h
    WHERE h.minute >= pg_catalog.date_bin(%(bucket)s::interval, pg_catalog.now(), timestamptz '2000-01-01 00:00:00+00')
                      - %(window)s::interval + %(bucket)s::interval
      AND (%(queue)s::text IS NULL OR h.queue = %(queue)s::text)
    GROUP BY h.minute
)
SELECT pg_catalog.date_bin(%(bucket)s::interval, m.minute, timestamptz '2000-01-01 00:00:00+00') AS at,
       pg_catalog.sum(m.completed)::bigint AS completed, pg_catalog.sum(m.failed)::bigint AS failed,
       pg_catalog.sum(m.dead)::bigint AS dead, pg_catalog.sum(m.expired)::bigint AS expired,
       pg_catalog.sum(m.cancelled)::bigint AS cancelled,
       pg_catalog.max(m.available)::bigint AS available, pg_catalog.max(m.running)::bigint AS running,
       pg_catalog.max(m.scheduled)::bigint AS scheduled,
       pg_catalog.max(m.lag_p50_s) AS lag_p50_s, pg_catalog.max(m.lag_p95_s) AS lag_p95_s,
       pg_catalog.max(m.run_p95_s) AS run_p95_s
FROM minutes m
GROUP BY 1
ORDER BY 1;

-- name: dashboard_now
SELECT pg_catalog.now() AS now;

-- name: dashboard_search_jobs
-- The job search across queues (pgsched.find_jobs: every filter optional,
-- keyset pagination on id, newest first).
SELECT f.id, f.queue, f.state, f.task, pg_catalog.left(f.args::text, 160) AS args, f.priority, f.attempt,
       f.max_attempts, f.run_at, f.worker, f.error, f.tenant, f.created_at, f.finished_at
FROM pgsched.find_jobs(
    p_task => %(task)s, p_states => %(states)s::text[], p_queue => %(queue)s, p_tenant => %(tenant)s,
    p_args => %(args)s::jsonb,
    p_since => coalesce(%(since)s::timestamptz, pg_catalog.now() - %(since_ago)s::interval),
    p_until => coalesce(%(until)s::timestamptz, pg_catalog.now() - %(until_ago)s::interval),
    p_time => %(field)s, p_before => %(before)s::bigint, p_max_id => %(max_id)s::bigint, p_limit => %(limit)s) f;

-- name: dashboard_bulk_preview
-- What a bulk action would touch: the matching jobs by state, and the largest
-- id (the bound the confirmed action keeps to).
SELECT f.state, pg_catalog.count(*) AS n, pg_catalog.max(f.id) AS max_id
FROM pgsched.find_jobs(
    p_task => %(task)s, p_states => %(states)s::text[], p_queue => %(queue)s, p_tenant => %(tenant)s,
    p_args => %(args)s::jsonb,
    p_since => coalesce(%(since)s::timestamptz, pg_catalog.now() - %(since_ago)s::interval),
    p_until => coalesce(%(until)s::timestamptz, pg_catalog.now() - %(until_ago)s::interval),
    p_time => %(field)s, p_before => NULL, p_max_id => %(max_id)s::bigint, p_limit => %(limit)s) f
GROUP BY f.state
ORDER BY f.state;

-- name: dashboard_bulk_cancel
-- The bulk actions, one statement each: the matching ids into cancel_many()/retry_many().
SELECT b.result, pg_catalog.count(*) AS n
FROM pgsched.cancel_many(ARRAY(SELECT f.id FROM pgsched.find_jobs(
    p_task => %(task)s, p_states => %(states)s::text[], p_queue => %(queue)s, p_tenant => %(tenant)s,
    p_args => %(args)s::jsonb,
    p_since => coalesce(%(since)s::timestamptz, pg_catalog.now() - %(since_ago)s::interval),
    p_until => coalesce(%(until)s::timestamptz, pg_catalog.now() - %(until_ago)s::interval),
    p_time => %(field)s, p_before => NULL, p_max_id => %(max_id)s::bigint, p_limit => %(limit)s) f)) b
GROUP BY b.result
ORDER BY b.result;

-- name: dashboard_bulk_retry
SELECT b.result, pg_catalog.count(*) AS n
FROM pgsched.retry_many(ARRAY(SELECT f.id FROM pgsched.find_jobs(
    p_task => %(task)s, p_states => %(states)s::text[], p_queue => %(queue)s, p_tenant => %(tenant)s,
    p_args => %(args)s::jsonb,
    p_since => coalesce(%(since)s::timestamptz, pg_catalog.now() - %(since_ago)s::interval),
    p_until => coalesce(%(until)s::timestamptz, pg_catalog.now() - %(until_ago)s::interval),
    p_time => %(field)s, p_before => NULL, p_max_id => %(max_id)s::bigint, p_limit => %(limit)s) f)) b
GROUP BY b.result
ORDER BY b.result;

-- name: dashboard_pause_queue
-- Actions, each one SQL function call that reports what it did.
SELECT CASE WHEN pgsched.pause_queue(%s::text) THEN 'paused' END AS result;

-- name: dashboard_resume_queue
SELECT CASE WHEN pgsched.resume_queue(%s::text) THEN 'resumed' ELSE 'was_not_paused' END AS result;

-- name: dashboard_pause_schedule
SELECT CASE WHEN pgsched.pause_schedule(%s::text) THEN 'paused' ELSE 'not_found' END AS result;

-- name: dashboard_resume_schedule
SELECT CASE WHEN pgsched.resume_schedule(%s::text) THEN 'resumed' ELSE 'not_found' END AS result;
