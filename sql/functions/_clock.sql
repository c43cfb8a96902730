-- _clock
-- contract: the moved clock a function was given, checked. p_now exists so
-- tests can move time; only the schema's owner (and its members, superusers
-- among them) may use it. For any other login a non-NULL p_now raises
-- insufficient_privilege (SQLSTATE 42501): the decision reads session_user,
-- the login, so SET ROLE changes nothing, and it holds inside SECURITY
-- DEFINER functions, where current_user is the owner. NULL returns NULL at
-- once (callers coalesce it with their clock): the hot path pays one call.
CREATE OR REPLACE FUNCTION pgsched._clock(p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_now IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(
            session_user,
            (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgsched'),
            'MEMBER') THEN
        RAISE EXCEPTION 'pgsched: only the owner of the pgsched schema may move the clock (p_now)'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Leave p_now NULL: the functions use the database clock.';
    END IF;
    RETURN p_now;
END
$$;
