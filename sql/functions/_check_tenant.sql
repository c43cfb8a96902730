-- _check_tenant
-- contract: a session confined to a tenant (see _tenant_scope: a member of
-- pgsched_tenant_scoped, bound with bind_tenant() or, unbound, confined to
-- nothing) may write only rows of that tenant; no
-- tenant is not "any tenant". Raises insufficient_privilege otherwise. The
-- decision follows the login, so SET ROLE and SET pgsched.tenant do not
-- change it for a bound or scoped login.
CREATE OR REPLACE FUNCTION pgsched._check_tenant(p_tenant text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_scope text := pgsched._tenant_scope();
BEGIN
    IF v_scope IS NOT NULL AND p_tenant IS DISTINCT FROM v_scope THEN
        RAISE EXCEPTION 'pgsched: this session is confined to tenant %, not %',
            CASE WHEN v_scope = '' THEN '(none: its login is not bound to a tenant)' ELSE v_scope END,
            coalesce(p_tenant, '(none)')
            USING ERRCODE = 'insufficient_privilege',
                  HINT = CASE WHEN v_scope = '' THEN 'An administrator binds the login: SELECT pgsched.bind_tenant(''login'', ''tenant'').'
                              ELSE 'Name the tenant of this session.' END;
    END IF;
END
$$;
