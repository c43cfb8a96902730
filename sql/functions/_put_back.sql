-- _put_back
-- contract: returns a running job to the queue under its fencing token
-- without spending its failure budget: max_attempts grows by one, so the
-- attempt counter keeps growing (every run has a new attempt and token) while
-- the job keeps as many failures as it had. A job whose cancellation was
-- requested is cancelled instead. Returns the new state, or 'lease_lost'
-- (a stale token, or a lease that ran out before p_now: expire_leases hands
-- that job back, and claim() already counts its slot free).
--
-- Hand-backs are bounded: a started run handed back by a worker shutting
-- down (p_kind 'released') counts in `handbacks`; the one past
-- pgsched.config.max_handbacks (default 3) makes the job 'dead' with that
-- reason, so a job that hangs every worker cannot hold a slot across deploys
-- forever. A job released before its handler started counts nothing, and
-- neither does a service job (jobs.service): it runs until cancelled, so
-- every deploy hands it back.
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
    v_max_handbacks integer;
    v_error text;
    v_worker text;
BEGIN
    SELECT c.max_handbacks INTO v_max_handbacks FROM pgsched.config c;
    -- The holder of this token (the claim recorded below): a token is leased once.
    SELECT j.leased_by INTO v_worker FROM pgsched.jobs j WHERE j.id = p_job_id AND j.lease_token = p_token;
    DELETE FROM pgsched.jobs j
    WHERE p_kind = 'released'
      AND j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running' AND j.lease_expires_at > p_now
      AND j.cancel_requested_at IS NULL AND j.started_at IS NOT NULL
      AND j.handbacks >= v_max_handbacks AND NOT j.service
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        v_error := pg_catalog.format('handed back unfinished at shutdown %s times (max_handbacks %s)',
                                     v_job.handbacks + 1, v_max_handbacks);
        PERFORM pgsched._finish(v_job, 'dead', p_now, v_error, NULL,
            pg_catalog.jsonb_build_object('error', v_error, 'reason', 'handbacks', 'handbacks', v_job.handbacks + 1));
        RETURN 'dead';
    END IF;

    -- Handed back due now (p_run_at NULL): a job already due keeps its run_at, the
    -- time it was due (a schedule's fire time, what ctx.scheduled_at reports), as an
    -- expired lease does; only a snooze moves it.
    UPDATE pgsched.jobs j
    SET run_at = CASE WHEN p_run_at IS NULL THEN LEAST(j.run_at, p_now) ELSE p_run_at END,
        state = CASE WHEN v_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        -- saturates at the enqueue bound (jobs_max_attempts_range): never overflows
        max_attempts = j.max_attempts + (j.max_attempts < 1000000)::integer,
        handbacks = j.handbacks + (p_kind = 'released' AND j.started_at IS NOT NULL AND NOT j.service)::integer,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running' AND j.lease_expires_at > p_now
      AND j.cancel_requested_at IS NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        -- the attempt did not complete: its claim is recorded now (job_timeline)
        PERFORM pgsched._event(p_job_id, v_job.claimed_at, 'claimed', v_job.attempt, v_worker, p_token)
        WHERE v_job.claimed_at IS NOT NULL;
        PERFORM pgsched._event(p_job_id, p_now, p_kind, v_job.attempt, NULL, p_token,
            pg_catalog.jsonb_build_object('run_at', v_job.run_at));
        IF v_job.state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_job.state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running' AND j.lease_expires_at > p_now
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
