-- pause_schedule
-- contract: stops a schedule from firing (its not-yet-due occurrences are
-- withdrawn at the next scan) until resume_schedule(). Returns whether the
-- schedule exists (for a session confined to a tenant: one of its tenant).
CREATE OR REPLACE FUNCTION pgsched.pause_schedule(name text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    WITH changed AS (
        UPDATE pgsched.schedules s SET enabled = false
        WHERE s.name = pause_schedule.name AND pgsched._tenant_visible(s.tenant)
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM changed)
$$;
