-- cancel
-- contract: a waiting job (scheduled, waiting or available) is cancelled at once and
-- returns 'cancelled'; once that is returned the job can never start. A
-- running job gets a cancel request ('cancel_requested'), and its worker is
-- told at once: a NOTIFY on pgsched_cancel whose payload is the job id only
-- (the heartbeat, or a short poll without LISTEN, is the fallback). A claimed
-- job whose handler has not started yet never starts (start() refuses it);
-- a started one ends as 'cancelled' unless it had already succeeded. A
-- finished job is left as it is ('already_completed', 'already_dead',
-- 'already_cancelled'); an unknown id
-- returns 'not_found', as does a job of another tenant for a session
-- confined to one (see _check_tenant).
CREATE OR REPLACE FUNCTION pgsched.cancel(
    job_id bigint,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_job pgsched.jobs;
    v_state pgsched.job_state;
    v_tenant text;
BEGIN
    -- This function bypasses row-level security, so it confines tenants itself.
    SELECT t.tenant INTO v_tenant
    FROM (SELECT j.tenant FROM pgsched.jobs j WHERE j.id = cancel.job_id
          UNION ALL
          SELECT h.tenant FROM pgsched.job_history h WHERE h.id = cancel.job_id) t
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            PERFORM pgsched._check_tenant(v_tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN 'not_found';
        END;
    END IF;

    -- A job can move between waiting and running while we look (a claim, a
    -- retry); each statement is fenced on state, so try the pair again.
    FOR i IN 1 .. 3 LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = cancel.job_id AND j.state IN ('scheduled', 'waiting', 'available')
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._finish(v_job, 'cancelled', v_now, 'cancelled before it ran');
            RETURN 'cancelled';
        END IF;

        UPDATE pgsched.jobs j
        SET cancel_requested_at = coalesce(j.cancel_requested_at, v_now)
        WHERE j.id = cancel.job_id AND j.state = 'running'
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._event(v_job.id, v_now, 'cancel_requested', v_job.attempt, v_job.leased_by,
                                   v_job.lease_token);
            PERFORM pg_catalog.pg_notify('pgsched_cancel', v_job.id::text);
            RETURN 'cancel_requested';
        END IF;

        SELECT h.state INTO v_state
        FROM pgsched.job_history h
        WHERE h.id = cancel.job_id
        ORDER BY h.finished_at DESC
        LIMIT 1;
        IF FOUND AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = cancel.job_id) THEN
            RETURN 'already_' || v_state::text;
        END IF;
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = cancel.job_id) THEN
            RETURN 'not_found';
        END IF;
    END LOOP;
    RETURN 'busy';
END
$$;
