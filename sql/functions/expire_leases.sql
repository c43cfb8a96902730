-- expire_leases
-- contract: jobs whose lease ran out (their worker died, hung or lost its
-- connection) go back to 'available' at once, keeping their run_at (so they
-- come before newer work, and their start lag shows the time lost), or to 'dead' when their
-- attempts are used up, or to 'cancelled' when cancellation was requested,
-- each with a 'lease_expired' event naming the worker and token that lost
-- the lease. A service job (jobs.service) always goes back to 'available',
-- its attempt given back, so expiries never send it dead. Candidates are locked with SKIP LOCKED and every write re-checks
-- the token, the state and the expiry, so a completion racing the expiry
-- wins cleanly and a stale read never overwrites a newer claim. Returns the
-- number of jobs handled (at most p_limit; call again while it is p_limit).
-- Runs past their deadline (deadline_at + config.timeout_grace) are failed
-- too, even while their heartbeats continue (see _fail_overdue).
CREATE OR REPLACE FUNCTION pgsched.expire_leases(
    p_now   timestamptz DEFAULT NULL,
    p_limit integer     DEFAULT 1000,
    p_shard integer     DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_requeued text[];
    v_finished integer;
    v_count integer;
    v_job pgsched.jobs;
    v_expired record;
    v_outcome pgsched.job_state;
BEGIN
    WITH expired AS MATERIALIZED (
        SELECT j.id, j.shard, j.lease_token, j.leased_by, j.lease_expires_at
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.lease_expires_at < v_now
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), requeued AS (
        UPDATE pgsched.jobs j
        SET state = 'available',
            lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
            -- A service's lost lease does not use up an attempt: it is restarted, never sent dead.
            max_attempts = CASE WHEN j.service THEN least(j.max_attempts::bigint + 1, 1000000)::integer
                                ELSE j.max_attempts END,
            last_error = pg_catalog.format('lease expired at %s (worker %s)', e.lease_expires_at, e.leased_by)
        FROM expired e
        WHERE j.id = e.id AND j.shard = e.shard AND j.lease_token = e.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
          AND (j.attempt < j.max_attempts OR j.service) AND j.cancel_requested_at IS NULL
        RETURNING j.id, j.queue, j.attempt, e.leased_by, e.lease_token, e.lease_expires_at, j.claimed_at
    ), audit AS (
        -- the attempt's claim (not recorded while it ran: job_timeline), then its expiry
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        SELECT r.id, ev.at, ev.kind, r.attempt, r.leased_by, r.lease_token, ev.detail
        FROM requeued r
        CROSS JOIN pgsched.config c
        CROSS JOIN LATERAL (VALUES
            (1, r.claimed_at, 'claimed', NULL::jsonb),
            (2, v_now, 'lease_expired',
             pg_catalog.jsonb_build_object('lease_expires_at', r.lease_expires_at, 'outcome', 'available'))
        ) AS ev(step, at, kind, detail)
        WHERE c.audit AND ev.at IS NOT NULL
        ORDER BY r.id, ev.step
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT r.queue)
    INTO v_count, v_requeued
    FROM requeued r;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_requeued) q;

    -- Out of attempts (or cancel requested): these leave the active table.
    -- Rare, so one fenced DELETE per job keeps the filing simple.
    v_finished := 0;
    FOR v_expired IN
        SELECT j.id, j.shard, j.lease_token
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.lease_expires_at < v_now
          AND ((j.attempt >= j.max_attempts AND NOT j.service) OR j.cancel_requested_at IS NOT NULL)
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = v_expired.id AND j.shard = v_expired.shard AND j.lease_token = v_expired.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            v_outcome := CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END;
            PERFORM pgsched._event(v_job.id, v_now, 'lease_expired', v_job.attempt, v_job.leased_by,
                v_job.lease_token,
                pg_catalog.jsonb_build_object('lease_expires_at', v_job.lease_expires_at, 'outcome', v_outcome));
            PERFORM pgsched._finish(
                v_job,
                v_outcome,
                v_now,
                pg_catalog.format('lease expired at %s (worker %s) after attempt %s of %s',
                                  v_job.lease_expires_at, v_job.leased_by, v_job.attempt, v_job.max_attempts),
                NULL,
                pg_catalog.jsonb_build_object('lease_expires_at', v_job.lease_expires_at, 'reason', 'lease_expired'));
            v_finished := v_finished + 1;
        END IF;
    END LOOP;

    RETURN v_count + v_finished + pgsched._fail_overdue(p_now, p_limit, p_shard);
END
$$;
