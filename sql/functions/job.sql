-- job
-- contract: job p_id wherever it is: its active row in pgsched.jobs, else
-- its latest row in pgsched.job_history (a redriven job has one per finished
-- run; runs finished in one transaction are told apart by their fencing
-- token, which grows with every claim). No row for an id that never was, is
-- not committed yet, was pruned, or belongs to a tenant this session cannot
-- see. stored_in names the table the row came from; a column one table lacks
-- is NULL (an active job has no result or finished_at, a finished one no
-- lease expiry); error is the active job's last_error or the run's error.
-- SECURITY DEFINER, like dependency_outcomes: it reads as the owner, whom
-- row-level security does not confine, so it confines tenants itself
-- (_tenant_visible), as the policies would. Each half is an index probe by
-- id: a job enqueued now and one finished last week cost the same.
CREATE OR REPLACE FUNCTION pgsched.job(p_id bigint)
RETURNS TABLE (id bigint, shard smallint, state text, queue text, task text, args jsonb, priority integer,
               run_at timestamptz, attempt integer, max_attempts integer, tenant text, created_at timestamptz,
               started_at timestamptz, finished_at timestamptz, result jsonb, error text, leased_by text,
               lease_token bigint, lease_expires_at timestamptz, cancel_requested_at timestamptz,
               idempotency_key text, labels text[], schedule text, service boolean, progress real,
               progress_note text, progress_at timestamptz, steps jsonb, stored_in text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT f.id, f.shard, f.state, f.queue, f.task, f.args, f.priority, f.run_at, f.attempt, f.max_attempts,
           f.tenant, f.created_at, f.started_at, f.finished_at, f.result, f.error, f.leased_by, f.lease_token,
           f.lease_expires_at, f.cancel_requested_at, f.idempotency_key, f.labels, f.schedule, f.service,
           f.progress, f.progress_note, f.progress_at, f.steps, f.stored_in
    FROM (
        SELECT 0 AS rank, j.id, j.shard, j.state::text AS state, j.queue, j.task, j.args, j.priority, j.run_at,
               j.attempt, j.max_attempts, j.tenant, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
               NULL::jsonb AS result, j.last_error AS error, j.leased_by, j.lease_token, j.lease_expires_at,
               j.cancel_requested_at, j.idempotency_key, j.labels, j.schedule, j.service, j.progress,
               j.progress_note, j.progress_at, j.steps, 'jobs'::text AS stored_in
        FROM pgsched.jobs j
        WHERE j.id OPERATOR(pg_catalog.=) p_id AND pgsched._tenant_visible(j.tenant)
        UNION ALL
        (SELECT 1, h.id, h.shard, h.state::text, h.queue, h.task, h.args, h.priority, h.run_at,
                h.attempt, h.max_attempts, h.tenant, h.created_at, h.started_at, h.finished_at,
                h.result, h.error, h.leased_by, h.lease_token, NULL::timestamptz,
                NULL::timestamptz, h.idempotency_key, h.labels, h.schedule, h.service, h.progress,
                h.progress_note, h.progress_at, h.steps, 'job_history'::text
         FROM pgsched.job_history h
         WHERE h.id OPERATOR(pg_catalog.=) p_id AND pgsched._tenant_visible(h.tenant)
         ORDER BY h.finished_at DESC, h.lease_token DESC NULLS LAST
         LIMIT 1)
    ) f
    ORDER BY f.rank
    LIMIT 1
$$;
