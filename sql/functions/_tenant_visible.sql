-- _tenant_visible
-- contract: row-level security predicate. Roles that are members of
-- pgsched_tenant_scoped see (and write) only rows of the tenant named in the
-- setting pgsched.tenant; with the setting missing they see nothing. Other
-- roles see every row. No SET clause, so PostgreSQL inlines it into each
-- query's row filter; every call and operator is schema-qualified instead.
CREATE OR REPLACE FUNCTION pgsched._tenant_visible(p_tenant text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT NOT pg_catalog.pg_has_role(current_user, 'pgsched_tenant_scoped', 'MEMBER')
        OR p_tenant OPERATOR(pg_catalog.=) nullif(pg_catalog.current_setting('pgsched.tenant', true), '')
$$;
