-- _clock
-- contract: the moved clock a function was given, checked (_check_clock).
-- p_now exists so tests can move time; only the schema's owner (and its
-- members, superusers among them) may use it. NULL returns NULL (callers
-- coalesce it with their clock). A SQL function the planner inlines: the hot
-- path, where p_now is NULL, calls no function at all.
CREATE OR REPLACE FUNCTION pgsched._clock(p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_now IS NULL THEN NULL ELSE pgsched._check_clock(p_now) END
$$;
