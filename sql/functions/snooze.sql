-- snooze
-- contract: puts a running job back to run at run_at, under its fencing
-- token, without counting a failed attempt. Returns 'scheduled' or
-- 'available', 'cancelled' if cancellation had been requested, or
-- 'lease_lost' for a stale token.
CREATE OR REPLACE FUNCTION pgsched.snooze(
    job_id bigint,
    token  bigint,
    run_at timestamptz,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    RETURN pgsched._put_back(snooze.job_id, snooze.token, snooze.run_at, 'snoozed',
                             coalesce(pgsched._clock(snooze.p_now), pg_catalog.clock_timestamp()));
END
$$;
