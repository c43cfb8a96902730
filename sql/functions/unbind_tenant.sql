-- unbind_tenant
-- contract: removes the tenant binding of the login role `role`. It stays a
-- member of pgsched_tenant_scoped, so it is then confined to nothing (fails
-- closed) until it is bound again or that role is revoked from it. Only a
-- session that is not confined itself may unbind.
-- Returns the tenant it was bound to, or NULL.
CREATE OR REPLACE FUNCTION pgsched.unbind_tenant(role regrole)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_previous text;
BEGIN
    PERFORM pgsched._check_unconfined('unbind tenants');
    DELETE FROM pgsched.tenant_roles b WHERE b.role = unbind_tenant.role RETURNING b.tenant INTO v_previous;
    RETURN v_previous;
END
$$;
