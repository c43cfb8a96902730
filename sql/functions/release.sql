-- release
-- contract: hands running jobs back at once (a worker shutting down before
-- they finished), each under its fencing token, without counting a failure.
-- Returns one row per job with its new state or 'lease_lost'. Jobs are
-- visited in id order.
--
-- ran (one per job; NULL: true): false says the job's handler never ran here
-- although its start is recorded (a claim records the start of the jobs it
-- expects to take a slot within moments: claim(..., starts)); that start is
-- withdrawn first, so the hand-back counts as one before the handler started
-- (not against config.max_handbacks).
-- The signature before ran is replaced, not overloaded.
DROP FUNCTION IF EXISTS pgsched.release(bigint[], bigint[], timestamptz);
CREATE OR REPLACE FUNCTION pgsched.release(
    job_ids bigint[],
    tokens  bigint[],
    p_now   timestamptz DEFAULT NULL,
    ran     boolean[]   DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    -- the clock now, not at transaction start: a lease that ran out is not handed back (_put_back)
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_scope text := pgsched._caller_scope();
BEGIN
    IF release.ran IS NOT NULL AND false = ANY (release.ran) THEN
        UPDATE pgsched.jobs j
        SET started_at = NULL, deadline_at = NULL
        FROM unnest(release.job_ids, release.tokens, release.ran) AS u(id, token, ran)
        WHERE u.ran IS FALSE AND j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
          AND j.started_at IS NOT NULL
          AND (v_scope IS NULL OR j.tenant = v_scope);  -- tokens are guessable, tenants are not
    END IF;
    RETURN QUERY
    SELECT u.id, pgsched._put_back(u.id, u.token, NULL, 'released', v_now)
    FROM unnest(release.job_ids, release.tokens) AS u(id, token)
    ORDER BY u.id;
END
$$;
