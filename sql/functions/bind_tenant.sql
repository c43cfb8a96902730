-- bind_tenant
-- contract: confines the login role `role` to `tenant` on every path (reads
-- through row-level security, enqueues, claims, completions, cancels,
-- retries, schedules, idempotency keys) from its next statement on; SET ROLE
-- and SET pgsched.tenant do not move it. Rebinding replaces the tenant.
-- Only members of pgsched_tenant_scoped are confined, so the role is granted
-- it when it is not a member yet (the owner needs ADMIN OPTION on it).
-- Superusers and members of the schema's owner are never confined, so
-- binding one is refused. Only a session that is not confined itself may
-- bind. Returns the previous tenant, or NULL.
CREATE OR REPLACE FUNCTION pgsched.bind_tenant(role regrole, tenant text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_previous text;
BEGIN
    PERFORM pgsched._check_unconfined('bind tenants');
    IF bind_tenant.role IS NULL OR bind_tenant.tenant IS NULL THEN
        RAISE EXCEPTION 'pgsched: bind_tenant needs a role and a tenant' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.pg_has_role(bind_tenant.role, current_user, 'MEMBER') THEN
        RAISE EXCEPTION 'pgsched: % is a superuser or a member of the schema''s owner, which are never confined',
            bind_tenant.role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_catalog.pg_has_role(bind_tenant.role, 'pgsched_tenant_scoped', 'MEMBER') THEN
        EXECUTE pg_catalog.format('GRANT pgsched_tenant_scoped TO %I',
                                  (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid = bind_tenant.role));
    END IF;
    SELECT b.tenant INTO v_previous FROM pgsched.tenant_roles b WHERE b.role = bind_tenant.role;
    INSERT INTO pgsched.tenant_roles AS b (role, tenant, bound_at)
    VALUES (bind_tenant.role, bind_tenant.tenant, pg_catalog.now())
    ON CONFLICT ON CONSTRAINT tenant_roles_pkey DO UPDATE SET tenant = EXCLUDED.tenant, bound_at = EXCLUDED.bound_at;
    RETURN v_previous;
END
$$;
