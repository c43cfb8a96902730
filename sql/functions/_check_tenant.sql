-- _check_tenant
-- contract: a session confined to a tenant (its login role is a member of
-- pgsched_tenant_scoped) may enqueue only for the tenant in the setting
-- pgsched.tenant; with the setting missing it may enqueue nothing (fails
-- closed). Superusers are members of every role but are never confined.
-- Raises insufficient_privilege otherwise.
CREATE OR REPLACE FUNCTION pgsched._check_tenant(p_tenant text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_setting text := nullif(pg_catalog.current_setting('pgsched.tenant', true), '');
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
               WHERE r.rolname = session_user AND NOT r.rolsuper
                 AND pg_catalog.pg_has_role(r.oid, 'pgsched_tenant_scoped', 'MEMBER'))
       AND (v_setting IS NULL OR p_tenant IS DISTINCT FROM v_setting) THEN
        RAISE EXCEPTION 'pgsched: this role is confined to tenant %, not %',
            coalesce(v_setting, '(none set)'), coalesce(p_tenant, '(none)')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;
