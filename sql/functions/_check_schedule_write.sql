-- _check_schedule_write
-- contract: may the session create or replace the schedule p_name with
-- tenant p_tenant and source p_source? Raises insufficient_privilege unless
--   * the new tenant is the session's own when it is confined, and an
--     existing schedule of that name is visible to it (another tenant's
--     schedule is never overwritten); and
--   * a login holding pgsched_worker but not pgsched_admin (a worker
--     registering the schedules its code defines) writes source 'code' only,
--     and replaces only schedules that came from code.
CREATE OR REPLACE FUNCTION pgsched._check_schedule_write(p_name text, p_tenant text, p_source text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_tenant text;
    v_source text;
BEGIN
    PERFORM pgsched._check_tenant(p_tenant);
    SELECT s.tenant, s.source INTO v_tenant, v_source FROM pgsched.schedules s WHERE s.name = p_name;
    IF FOUND AND NOT pgsched._tenant_visible(v_tenant) THEN
        RAISE EXCEPTION 'pgsched: the schedule name % is taken', p_name
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, current_user, 'MEMBER')
       AND NOT pg_catalog.pg_has_role(session_user, 'pgsched_admin', 'MEMBER') THEN
        IF p_source IS DISTINCT FROM 'code' THEN
            RAISE EXCEPTION 'pgsched: a worker login registers only schedules defined in code (source ''code'')'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF FOUND AND v_source <> 'code' THEN
            RAISE EXCEPTION 'pgsched: schedule % was made with source %; only pgsched_admin may replace it',
                p_name, v_source
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
END
$$;
