-- Single jobs: looking one up (wherever it is) and acting on it.

-- name: cancel
SELECT pgsched.cancel(%s);

-- name: retry
SELECT pgsched.retry(%s);

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

-- name: job_progress
-- A job's last progress report (ctx.progress) and its steps: its active row, else its latest history.
SELECT progress, progress_note, progress_at, steps FROM (
    SELECT 0 AS rank, j.progress, j.progress_note, j.progress_at, j.steps FROM pgsched.jobs j WHERE j.id = %s
    UNION ALL
    (SELECT 1, h.progress, h.progress_note, h.progress_at, h.steps
     FROM pgsched.job_history h WHERE h.id = %s ORDER BY h.finished_at DESC LIMIT 1)
) s ORDER BY rank LIMIT 1;
