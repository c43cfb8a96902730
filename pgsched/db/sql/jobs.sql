-- Single jobs: looking one up (wherever it is) and acting on it.

-- name: cancel
SELECT pgsched.cancel(%s);

-- name: retry
SELECT pgsched.retry(%s);

-- Every lookup of one job wherever it is goes through pgsched.job(): its
-- active row, else its latest finished run, and no row for another tenant's.

-- name: job_status
SELECT state, queue, task, attempt, max_attempts, result, error, finished_at FROM pgsched.job(%s::bigint);

-- name: task_result
-- A job as a framework's task result shows it (pgsched.contrib.django).
-- JSON as text: a framework's connection may load jsonb its own way (Django's leaves it a string).
SELECT state, task, args::text, attempt, leased_by AS worker, created_at, started_at, finished_at, result::text,
       error
FROM pgsched.job(%s::bigint);

-- name: job_progress
-- A job's last progress report (ctx.progress) and its steps.
SELECT progress, progress_note, progress_at, steps FROM pgsched.job(%s::bigint);

-- name: show_job
-- `pgsched jobs show` (and `pgsched enqueue --json`): every column, and the table it is stored in.
SELECT stored_in AS "table", id, state, queue, task, args, priority, run_at, attempt, max_attempts,
       leased_by AS worker, lease_token, lease_expires_at, cancel_requested_at, idempotency_key, labels, tenant,
       shard, created_at, started_at, finished_at, result, error, service, progress, progress_note, progress_at,
       steps
FROM pgsched.job(%(id)s::bigint);

-- name: dashboard_job
-- The dashboard's job page.
SELECT stored_in AS "table", id, state, queue, task, args, priority, run_at, attempt, max_attempts,
       leased_by AS worker, lease_token, lease_expires_at, cancel_requested_at, idempotency_key, labels, tenant,
       shard, schedule, created_at, started_at, finished_at, result, error, progress, progress_note, progress_at
FROM pgsched.job(%(id)s::bigint);

-- name: list_jobs
-- `pgsched jobs list`: one row per job, newest id first: the active row when there is one, else
-- the latest history row (a redriven job has several). Both halves walk their id indexes backwards
-- and stop at the limit; the one-time filters on the states skip a table that cannot hold the states
-- asked for.
WITH active AS (
    SELECT j.id, j.queue, j.task, j.state::text AS state, j.attempt, j.max_attempts, j.run_at,
           j.leased_by AS worker, j.last_error AS error, j.created_at, NULL::timestamptz AS finished_at, j.service,
           -- a service's uptime: since its current run started
           CASE WHEN j.service AND j.state = 'running' THEN pg_catalog.now() - coalesce(j.started_at, j.claimed_at)
           END AS uptime
    FROM pgsched.jobs j
    WHERE (%(states)s::text[] IS NULL OR %(states)s::text[] && ARRAY['scheduled', 'waiting', 'available', 'running'])
      AND (NOT %(services)s OR j.service)
      AND (%(states)s::text[] IS NULL OR j.state = ANY (%(states)s::text[]::pgsched.job_state[]))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
    ORDER BY j.id DESC
    LIMIT %(limit)s
), finished AS (
    SELECT h.id, h.queue, h.task, h.state::text AS state, h.attempt, h.max_attempts, h.run_at,
           h.leased_by AS worker, h.error, h.created_at, h.finished_at, h.service, NULL::interval AS uptime
    FROM pgsched.job_history h
    WHERE (%(states)s::text[] IS NULL OR %(states)s::text[] && ARRAY['completed', 'dead', 'cancelled'])
      AND (NOT %(services)s OR h.service)
      AND (%(states)s::text[] IS NULL OR h.state = ANY (%(states)s::text[]::pgsched.job_state[]))
      AND (%(queue)s::text IS NULL OR h.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR h.task = %(task)s::text)
      AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
      AND NOT EXISTS (
          SELECT 1 FROM pgsched.job_history h2 WHERE h2.id = h.id AND h2.finished_at > h.finished_at)
    ORDER BY h.id DESC
    LIMIT %(limit)s
)
SELECT * FROM active
UNION ALL
SELECT * FROM finished
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_timeline
-- A job's transitions in order (`pgsched jobs show`, the dashboard's job page).
SELECT e.at, e.kind, e.attempt, e.worker, e.token, e.detail
FROM pgsched.job_timeline e
WHERE e.job_id = %(id)s;

-- name: cancel_job
-- pgsched.cancel() of one job, its answer as result (`pgsched jobs cancel`, the dashboard).
SELECT pgsched.cancel(%s::bigint)::text AS result;

-- name: retry_job
-- pgsched.retry() of one job, its answer as result (`pgsched jobs retry`, `dlq retry`, the dashboard).
SELECT pgsched.retry(%s::bigint)::text AS result;

-- name: dead_letters
-- `pgsched dlq`: the dead letters of a queue (or all), the latest deaths first.
SELECT d.id, d.queue, d.task, d.args, d.attempt, d.max_attempts, d.error, d.died_at, d.last_worker,
       d.created_at, d.idempotency_key, d.labels, d.tenant
FROM pgsched.dead_letters d
WHERE %(queue)s::text IS NULL OR d.queue = %(queue)s::text
ORDER BY d.died_at DESC, d.id DESC
LIMIT %(limit)s;

-- name: count_dead_letters
SELECT count(*) AS n FROM pgsched.dead_letters d WHERE %s::text IS NULL OR d.queue = %s::text;

-- name: dead_letter_ids
-- `pgsched dlq retry --all`: the ids to redrive, in batches.
SELECT d.id FROM pgsched.dead_letters d WHERE %s::text IS NULL OR d.queue = %s::text ORDER BY d.id;

-- name: retry_each
-- pgsched.retry() of each id, in one statement: (id, result) per job.
SELECT t.id, pgsched.retry(t.id) AS result FROM unnest(%s::bigint[]) AS t(id);
