-- release
-- contract: hands running jobs back at once (a worker shutting down before
-- they finished), each under its fencing token, without counting a failure.
-- Returns one row per job with its new state or 'lease_lost'. Jobs are
-- visited in id order.
CREATE OR REPLACE FUNCTION pgsched.release(
    job_ids bigint[],
    tokens  bigint[],
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    -- the clock now, not at transaction start: a lease that ran out is not handed back (_put_back)
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
BEGIN
    RETURN QUERY
    SELECT u.id, pgsched._put_back(u.id, u.token, NULL, 'released', v_now)
    FROM unnest(release.job_ids, release.tokens) AS u(id, token)
    ORDER BY u.id;
END
$$;
