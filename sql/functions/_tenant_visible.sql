-- _tenant_visible
-- contract: whether a row of tenant p_tenant is visible to (and writable by)
-- the current session, as the row-level security policies decide it (see
-- _tenant_scope): true for every row when the session is not confined,
-- else only for rows of its tenant (no tenant is not "any tenant"). For the
-- SECURITY DEFINER functions, which bypass row-level security and check
-- single rows with it. Every call and operator is schema-qualified.
CREATE OR REPLACE FUNCTION pgsched._tenant_visible(p_tenant text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT CASE WHEN s.scope IS NULL THEN true
                ELSE coalesce(p_tenant OPERATOR(pg_catalog.=) s.scope, false) END
    FROM pgsched._tenant_scope() AS s(scope)
$$;
