-- _check_unconfined
-- contract: raises insufficient_privilege when the session is confined to a
-- tenant (see _tenant_scope): what p_action changes is shared by every
-- tenant (queues, task policies, tenant bindings, scanner leases), so only
-- an unconfined login may do it.
CREATE OR REPLACE FUNCTION pgsched._check_unconfined(p_action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF pgsched._tenant_scope() IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: a session confined to a tenant cannot %', p_action
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'It changes what every tenant shares; use a login that is not bound to a tenant.';
    END IF;
END
$$;
