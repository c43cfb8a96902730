-- fail
-- contract: reports a failed run under its fencing token and returns the
-- job's resulting state: 'scheduled' or 'available' (a retry, at retry_at or
-- after the task/queue backoff), 'dead' (attempts exhausted, or final), or
-- 'cancelled' (cancellation had been requested). A stale token changes
-- nothing and returns 'lease_lost', as does a lease that has run out (even
-- before expire_leases handed the job back: its slot is already free). A result (a command's exit code and
-- output) is kept with the failed attempt's event, and in the history row
-- when the job ends here.
--
-- Each branch is one fenced statement (token and state in its WHERE). The
-- retry branch runs first and excludes cancel-requested jobs; if a cancel
-- lands between the two, the terminal branch catches it.
CREATE OR REPLACE FUNCTION pgsched.fail(
    job_id   bigint,
    token    bigint,
    error    text,
    retry_at timestamptz DEFAULT NULL,
    final    boolean     DEFAULT false,
    p_now    timestamptz DEFAULT NULL,
    result   jsonb       DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_job pgsched.jobs;
    v_state pgsched.job_state;
    -- The lease is checked against the clock when the statement runs, as claim() reads it.
    v_live timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_scope text := pgsched._caller_scope();
BEGIN
    UPDATE pgsched.jobs j
    SET run_at = v.run_at,
        state = CASE WHEN v.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
        last_error = fail.error
    FROM (
        SELECT j2.id, j2.shard, j2.leased_by,
               coalesce(fail.retry_at, v_now + pgsched._backoff(j2.task, j2.queue, j2.attempt, j2.tenant)) AS run_at
        FROM pgsched.jobs j2
        WHERE j2.id = fail.job_id AND j2.lease_token = fail.token
          AND (v_scope IS NULL OR j2.tenant = v_scope)
    ) v
    WHERE j.id = v.id AND j.shard = v.shard
      AND j.lease_token = fail.token AND j.state = 'running' AND j.lease_expires_at > v_live
      AND NOT coalesce(fail.final, false)
      AND j.attempt < j.max_attempts
      AND j.cancel_requested_at IS NULL
    RETURNING j.state, j.attempt, j.queue, j.run_at, v.leased_by, j.claimed_at
    INTO v_state, v_job.attempt, v_job.queue, v_job.run_at, v_job.leased_by, v_job.claimed_at;
    IF FOUND THEN
        -- the attempt did not complete: its claim is recorded now (job_timeline)
        PERFORM pgsched._event(fail.job_id, v_job.claimed_at, 'claimed', v_job.attempt, v_job.leased_by, fail.token)
        WHERE v_job.claimed_at IS NOT NULL;
        PERFORM pgsched._event(fail.job_id, v_now, 'failed', v_job.attempt, v_job.leased_by, fail.token,
            pg_catalog.jsonb_build_object('error', fail.error, 'retry_at', v_job.run_at)
            || CASE WHEN fail.result IS NULL THEN '{}' ELSE pg_catalog.jsonb_build_object('result', fail.result) END);
        IF v_state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = fail.job_id AND j.lease_token = fail.token AND j.state = 'running'
      AND j.lease_expires_at > v_live
      AND (v_scope IS NULL OR j.tenant = v_scope)
      AND (coalesce(fail.final, false) OR j.attempt >= j.max_attempts OR j.cancel_requested_at IS NOT NULL)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        v_state := CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END;
        PERFORM pgsched._finish(v_job, v_state, v_now, fail.error, fail.result);
        RETURN v_state::text;
    END IF;
    RETURN 'lease_lost';
END
$$;
