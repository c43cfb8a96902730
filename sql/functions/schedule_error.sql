-- schedule_error
-- contract: records that a schedule cannot be expanded (a cron expression
-- that does not parse or never fires) so operators see why, and marks this
-- version handled so scanners do not retry it in a loop. Fenced by the
-- scanner's lease like every scanner write.
CREATE OR REPLACE FUNCTION pgsched.schedule_error(
    scanner  text,
    shard    integer,
    epoch    bigint,
    schedule text,
    version  integer,
    error    text,
    p_now    timestamptz DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pgsched._hold_shard(schedule_error.scanner, schedule_error.shard, schedule_error.epoch,
                                coalesce(pgsched._clock(p_now), pg_catalog.now()));
    UPDATE pgsched.schedules s
    SET last_error = schedule_error.error, expanded_version = s.version
    WHERE s.name = schedule_error.schedule AND s.version = schedule_error.version;
END
$$;
