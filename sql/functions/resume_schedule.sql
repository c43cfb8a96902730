-- resume_schedule
-- contract: lets a paused schedule fire again from now on; the occurrences
-- that fell in the pause are not misfires, they are simply not run. Returns
-- whether the schedule exists (for a session confined to a tenant: one of
-- its tenant).
CREATE OR REPLACE FUNCTION pgsched.resume_schedule(name text, p_now timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
BEGIN
    UPDATE pgsched.schedules s
    SET enabled = true, expanded_until = v_now
    WHERE s.name = resume_schedule.name AND NOT s.enabled AND pgsched._tenant_visible(s.tenant);
    RETURN FOUND OR EXISTS (SELECT 1 FROM pgsched.schedules s
                            WHERE s.name = resume_schedule.name AND pgsched._tenant_visible(s.tenant));
END
$$;
