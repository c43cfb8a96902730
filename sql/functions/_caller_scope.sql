-- _caller_scope
-- contract: _tenant_scope() as the owner's SECURITY DEFINER functions see it,
-- where current_user is the owner: NULL at once for a member of the owner's
-- role (never confined, see _tenant_scope), else _tenant_scope(). A SQL
-- function the planner inlines: such a caller calls no function at all.
-- Only the owner may execute it (90_grants.sql grants it to no role): for any
-- other current_user the shortcut would not mean "the owner".
CREATE OR REPLACE FUNCTION pgsched._caller_scope()
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN pg_catalog.pg_has_role(session_user, current_user, 'MEMBER') THEN NULL
                ELSE pgsched._tenant_scope() END
$$;
