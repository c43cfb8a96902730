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
