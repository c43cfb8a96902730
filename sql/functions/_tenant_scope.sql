-- _tenant_scope
-- contract: the tenant the current session is confined to, decided from its
-- login (session_user), so neither SET ROLE nor a setting moves it:
--   NULL   not confined: the schema's owner and its members (superusers
--          among them), and logins that are neither bound nor scoped and
--          did not narrow themselves with SET pgsched.tenant;
--   tenant the login is bound to a tenant in pgsched.tenant_roles
--          (bind_tenant()); pgsched.tenant is ignored;
--   ''     confined to nothing (no row has tenant ''): a member of
--          pgsched_tenant_scoped that is not bound. Fails closed;
--   or, for a login neither bound nor scoped, the tenant it chose with
--   SET pgsched.tenant (a voluntary filter for a login trusted with all).
-- The row-level security policies call it once per statement, as an
-- InitPlan; SECURITY DEFINER so it may read pgsched.tenant_roles.
CREATE OR REPLACE FUNCTION pgsched._tenant_scope()
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_role oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user);
    v_tenant text;
BEGIN
    -- current_user is this function's owner, the schema's owner.
    IF pg_catalog.pg_has_role(v_role, current_user, 'MEMBER') THEN
        RETURN NULL;
    END IF;
    SELECT b.tenant INTO v_tenant FROM pgsched.tenant_roles b WHERE b.role OPERATOR(pg_catalog.=) v_role;
    IF FOUND THEN
        RETURN v_tenant;
    END IF;
    IF pg_catalog.pg_has_role(v_role, 'pgsched_tenant_scoped', 'MEMBER') THEN
        RETURN '';
    END IF;
    RETURN nullif(pg_catalog.current_setting('pgsched.tenant', true), '');
END
$$;
