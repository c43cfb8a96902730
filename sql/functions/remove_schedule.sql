-- remove_schedule
-- contract: deletes a schedule and withdraws its occurrences that have not
-- started (queued ones leave without running; running ones finish). Returns
-- how many occurrences were withdrawn, or NULL when no such schedule exists
-- (also for another tenant's schedule when the session is confined to one).
CREATE OR REPLACE FUNCTION pgsched.remove_schedule(name text, p_now timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_count integer;
BEGIN
    DELETE FROM pgsched.schedules s WHERE s.name = remove_schedule.name AND pgsched._tenant_visible(s.tenant);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_count := pgsched._withdraw(remove_schedule.name, '-infinity', v_now, 'schedule removed');
    RETURN v_count;
END
$$;
