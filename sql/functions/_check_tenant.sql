-- _check_tenant
-- contract: a session confined to a tenant (its login role is a member of
-- pgsched_tenant_scoped) may enqueue only for the tenant in the setting
-- pgsched.tenant; with the setting missing it may enqueue nothing (fails
-- closed). Raises insufficient_privilege otherwise.
CREATE OR REPLACE FUNCTION pgsched._check_tenant(p_tenant text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_has_role(session_user, 'pgsched_tenant_scoped', 'MEMBER')
       AND p_tenant IS DISTINCT FROM nullif(pg_catalog.current_setting('pgsched.tenant', true), '') THEN
        RAISE EXCEPTION 'pgsched: this role is confined to tenant %, not %',
            coalesce(nullif(pg_catalog.current_setting('pgsched.tenant', true), ''), '(none set)'),
            coalesce(p_tenant, '(none)')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;
