-- resume_schedule
-- contract: lets a paused schedule fire again from now on; the occurrences
-- that fell in the pause are not misfires, they are simply not run. Returns
-- whether the schedule exists (for a session confined to a tenant: one of
-- its tenant).
CREATE OR REPLACE FUNCTION pgsched.resume_schedule(name text, p_now timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    WITH changed AS (
        UPDATE pgsched.schedules s
        SET enabled = true, expanded_until = coalesce(pgsched._clock(resume_schedule.p_now), pg_catalog.now())
        WHERE s.name = resume_schedule.name AND NOT s.enabled AND pgsched._tenant_visible(s.tenant)
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM changed)
        OR EXISTS (SELECT 1 FROM pgsched.schedules s
                   WHERE s.name = resume_schedule.name AND pgsched._tenant_visible(s.tenant))
$$;
