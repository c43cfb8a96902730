-- _finish
-- contract: records a job that was just deleted from pgsched.jobs (by the
-- caller's own fenced DELETE, in the same transaction) as finished: a
-- history row in p_state, the audit events of a job that did not complete
-- (the claim of the attempt it was running, if any, then p_state; a
-- completion is read from the history row), the idempotency key's
-- retention clock started (a service's key is freed at once), and the
-- status event on pgsched_events (when
-- pgsched.config.events is on; payload in docs/events.md, the same as
-- complete()'s); a waiting job's dependency rows dropped, and a dead or
-- cancelled job's dependents cancelled or left waiting by their policy
-- (_fail_dependents), or made due ('run', _release_callbacks). Callers do
-- the check-and-write; this only files.
CREATE OR REPLACE FUNCTION pgsched._finish(
    p_job    pgsched.jobs,
    p_state  pgsched.job_state,
    p_now    timestamptz,
    p_error  text  DEFAULT NULL,
    p_result jsonb DEFAULT NULL,
    p_detail jsonb DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_config pgsched.config;
BEGIN
    SELECT * INTO v_config FROM pgsched.config;
    INSERT INTO pgsched.job_history
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
         leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule,
         service, claimed_at, concurrency_key, timeout, progress, progress_note, progress_at, steps,
         memory_limit, cpu_limit)
    VALUES (p_job.id, p_job.shard, p_state, p_job.queue, p_job.task, p_job.args, p_job.priority,
            p_job.run_at, p_job.attempt, p_job.max_attempts, p_job.lease_token, p_job.leased_by,
            p_job.idempotency_key, p_job.labels, p_job.tenant, p_job.created_at,
            -- a worker that never called start() (SQL only): the claim is the start;
            -- a job cancelled before its handler started has none
            coalesce(p_job.started_at,
                     CASE WHEN p_job.state = 'running' AND p_state <> 'cancelled' THEN p_job.claimed_at END),
            p_now, p_result, p_error, p_job.schedule, p_job.service, p_job.claimed_at, p_job.concurrency_key,
            p_job.timeout, p_job.progress, p_job.progress_note, p_job.progress_at, p_job.steps,
            p_job.memory_limit, p_job.cpu_limit);
    IF v_config.events THEN
        PERFORM pg_catalog.pg_notify('pgsched_events', pg_catalog.json_build_object(
            'id', p_job.id, 'queue', p_job.queue, 'task', p_job.task, 'state', p_state,
            'attempt', p_job.attempt)::text);
    END IF;
    IF v_config.audit AND p_state <> 'completed' THEN
        IF p_job.state = 'running' AND p_job.claimed_at IS NOT NULL THEN
            INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
            VALUES (p_job.id, p_job.claimed_at, 'claimed', p_job.attempt, p_job.leased_by, p_job.lease_token);
        END IF;
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        VALUES (p_job.id, p_now, p_state::text, p_job.attempt, p_job.leased_by, p_job.lease_token,
                coalesce(p_detail, CASE WHEN p_error IS NULL THEN NULL ELSE pg_catalog.jsonb_build_object('error', p_error) END));
    END IF;
    -- Dependencies (docs/dependencies.md): a waiting job takes its own rows
    -- with it; a dead or cancelled one applies its dependents' policy.
    IF p_job.state = 'waiting' THEN
        DELETE FROM pgsched.job_dependencies d WHERE d.job = p_job.id;
    END IF;
    IF p_state <> 'completed'
       AND EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = p_job.id AND d.on_failure = 'cancel') THEN
        PERFORM pgsched._fail_dependents(p_job.id, p_state, p_now);
    END IF;
    IF p_state <> 'completed'
       AND EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = p_job.id AND d.on_failure = 'run') THEN
        PERFORM pgsched._release_callbacks(p_job.id, p_now);
    END IF;
    IF p_job.idempotency_key IS NOT NULL THEN
        UPDATE pgsched.idempotency_keys k
        -- A service's key, and a key of scope 'active', is free again once
        -- the job ended: the next enqueue starts it anew.
        SET expires_at = CASE WHEN p_job.service OR k.scope = 'active' THEN p_now
                              ELSE p_now + v_config.idempotency_retention END
        WHERE k.key = p_job.idempotency_key AND k.job_id = p_job.id;
    END IF;
END
$$;
