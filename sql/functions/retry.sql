-- retry
-- contract: re-enqueues (redrives) a dead or cancelled job under its own id,
-- due now, with a fresh attempt budget (the task's max_attempts, else the
-- install default) on top of the attempts it used: the attempt counter keeps
-- growing across redrives. Its history rows stay. Returns
-- 'retried', 'active' (the job is queued or running already),
-- 'not_retryable' (it completed) or 'not_found' (also for a job of another
-- tenant when the session is confined to one, see _check_tenant). It keeps
-- its own run limit (job_history.timeout); a command job gets its deadline
-- again as enqueue_command sets it: its args' timeout_s + the current
-- config.command_timeout_margin.
CREATE OR REPLACE FUNCTION pgsched.retry(
    job_id bigint,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_last pgsched.job_history;
    v_id bigint;
    v_tenant text;
BEGIN
    -- This function bypasses row-level security, so it confines tenants itself.
    SELECT t.tenant INTO v_tenant
    FROM (SELECT j.tenant FROM pgsched.jobs j WHERE j.id = retry.job_id
          UNION ALL
          SELECT h.tenant FROM pgsched.job_history h WHERE h.id = retry.job_id) t
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            PERFORM pgsched._check_tenant(v_tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN 'not_found';
        END;
    END IF;

    -- An enqueue that is making a job depend on this one finishes first (see _depend).
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgsched.depend'), pg_catalog.hashint8(retry.job_id));
    IF EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = retry.job_id) THEN
        RETURN 'active';
    END IF;
    SELECT * INTO v_last
    FROM pgsched.job_history h
    WHERE h.id = retry.job_id
    ORDER BY h.finished_at DESC
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF v_last.state = 'completed' THEN
        RETURN 'not_retryable';
    END IF;

    -- The primary key (id, shard) makes a concurrent second redrive a no-op.
    INSERT INTO pgsched.jobs AS j
        (id, shard, queue, task, args, priority, run_at, idempotency_key, labels, tenant, created_at, service,
         concurrency_key, memory_limit, cpu_limit, timeout)
    VALUES (v_last.id, v_last.shard, v_last.queue, v_last.task, v_last.args, v_last.priority, v_now,
            v_last.idempotency_key, v_last.labels, v_last.tenant, v_last.created_at, v_last.service,
            v_last.concurrency_key, v_last.memory_limit, v_last.cpu_limit,
            CASE WHEN v_last.task = 'pgsched.command' AND pg_catalog.jsonb_typeof(v_last.args -> 'timeout_s') = 'number'
                      AND (v_last.args ->> 'timeout_s')::double precision > 0
                 THEN pg_catalog.make_interval(secs => (v_last.args ->> 'timeout_s')::double precision)
                      + (SELECT c.command_timeout_margin FROM pgsched.config c)
                 ELSE v_last.timeout END)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO v_id;
    IF v_id IS NULL THEN
        RETURN 'active';
    END IF;
    -- The insert trigger starts every job at attempt 0; carry the count on.
    UPDATE pgsched.jobs j
    SET attempt = v_last.attempt,
        max_attempts = least(v_last.attempt::bigint + j.max_attempts, 1000000)::integer
    WHERE j.id = v_id AND j.shard = v_last.shard;
    PERFORM pgsched._event(v_id, v_now, 'retried', v_last.attempt, NULL, NULL,
        pg_catalog.jsonb_build_object('previous_state', v_last.state));
    RETURN 'retried';
END
$$;
