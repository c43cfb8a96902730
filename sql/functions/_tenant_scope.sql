-- _tenant_scope
-- contract: the tenant the current session is confined to, decided from its
-- login (session_user), so neither SET ROLE nor a setting moves it:
--   NULL   not confined: the schema's owner and its members (superusers
--          among them), and logins that are not members of
--          pgsched_tenant_scoped, unless they narrowed themselves with
--          SET pgsched.tenant (a filter they chose, not a boundary);
--   tenant a member of pgsched_tenant_scoped bound to it in
--          pgsched.tenant_roles (bind_tenant()); pgsched.tenant is ignored;
--   ''     a member of pgsched_tenant_scoped that is not bound: confined to
--          nothing (no row has tenant ''). Fails closed.
-- The row-level security policies call it once per statement (InitPlans);
-- SECURITY DEFINER so it may read pgsched.tenant_roles. Unconfined logins
-- pay two role checks and no query: it runs on every claim and enqueue.
CREATE OR REPLACE FUNCTION pgsched._tenant_scope()
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    -- current_user is this function's owner, the schema's owner.
    IF pg_catalog.pg_has_role(session_user, current_user, 'MEMBER') THEN
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, 'pgsched_tenant_scoped', 'MEMBER') THEN
        RETURN nullif(pg_catalog.current_setting('pgsched.tenant', true), '');
    END IF;
    RETURN coalesce((SELECT b.tenant FROM pgsched.tenant_roles b
                     WHERE b.role OPERATOR(pg_catalog.=) pg_catalog.to_regrole(pg_catalog.quote_ident(session_user))),
                    '');
END
$$;
