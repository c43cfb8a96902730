-- _check_clock
-- contract: p_now, once the caller is found allowed to move the clock: only
-- the schema's owner (and its members, superusers among them). For any other
-- login it raises insufficient_privilege (SQLSTATE 42501): the decision reads
-- session_user, the login, so SET ROLE changes nothing, and it holds inside
-- SECURITY DEFINER functions, where current_user is the owner. Called by
-- _clock for a non-NULL p_now only.
CREATE OR REPLACE FUNCTION pgsched._check_clock(p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
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
