-- next_due
-- contract: the earliest run_at among scheduled jobs (NULL when there are
-- none): one probe of each shard's scheduled index, so a scanner can sleep
-- exactly until then.
CREATE OR REPLACE FUNCTION pgsched.next_due(p_shard integer DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_shard IS NULL THEN
        RETURN (SELECT pg_catalog.min(j.run_at) FROM pgsched.jobs j WHERE j.state = 'scheduled');
    END IF;
    RETURN (SELECT pg_catalog.min(j.run_at) FROM pgsched.jobs j WHERE j.state = 'scheduled' AND j.shard = p_shard);
END
$$;
