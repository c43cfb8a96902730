-- _put_back
-- contract: returns a running job to the queue under its fencing token
-- without spending its failure budget: max_attempts grows by one, so the
-- attempt counter keeps growing (every run has a new attempt and token) while
-- the job keeps as many failures as it had. A job whose cancellation was
-- requested is cancelled instead. Returns the new state, or 'lease_lost'.
CREATE OR REPLACE FUNCTION pgsched._put_back(
    p_job_id bigint,
    p_token  bigint,
    p_run_at timestamptz,
    p_kind   text,
    p_now    timestamptz
)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_job pgsched.jobs;
    v_run_at timestamptz := coalesce(p_run_at, p_now);
    v_scope text := pgsched._tenant_scope();
    v_worker text;
BEGIN
    -- The holder of this token (the claim recorded below): a token is leased once.
    SELECT j.leased_by INTO v_worker FROM pgsched.jobs j WHERE j.id = p_job_id AND j.lease_token = p_token;
    UPDATE pgsched.jobs j
    SET run_at = v_run_at,
        state = CASE WHEN v_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        -- saturates at the enqueue bound (jobs_max_attempts_range): never overflows
        max_attempts = j.max_attempts + (j.max_attempts < 1000000)::integer,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        -- the attempt did not complete: its claim is recorded now (job_timeline)
        PERFORM pgsched._event(p_job_id, v_job.claimed_at, 'claimed', v_job.attempt, v_worker, p_token)
        WHERE v_job.claimed_at IS NOT NULL;
        PERFORM pgsched._event(p_job_id, p_now, p_kind, v_job.attempt, NULL, p_token,
            pg_catalog.jsonb_build_object('run_at', v_run_at));
        IF v_job.state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_job.state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NOT NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        PERFORM pgsched._finish(v_job, 'cancelled', p_now, 'cancelled while running');
        RETURN 'cancelled';
    END IF;
    RETURN 'lease_lost';
END
$$;
