-- _valid_timezone
-- contract: true when p_tz is an IANA zone key both PostgreSQL and cron.py
-- (the pinned tzdata package) accept: 'Europe/Berlin', 'UTC', 'Etc/GMT-5'.
-- Offsets like '+05:00' and the host-specific names cron.py refuses
-- ('localtime', 'posixrules', 'Factory', 'posix/...', 'right/...') are refused.
CREATE OR REPLACE FUNCTION pgsched._valid_timezone(p_tz text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT p_tz IS NOT NULL
       AND p_tz ~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$'
       AND p_tz !~ '^(localtime|posixrules|Factory)$' AND p_tz !~ '^(posix|right)/'
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = p_tz)
$$;
