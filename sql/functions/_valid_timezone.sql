-- _valid_timezone
-- contract: true when p_tz is a time zone name PostgreSQL knows (IANA names
-- such as 'Europe/Berlin', or 'UTC'); offsets like '+05:00' are refused.
CREATE OR REPLACE FUNCTION pgsched._valid_timezone(p_tz text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT p_tz IS NOT NULL AND p_tz !~ '^[+-]?[0-9]'
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = p_tz)
$$;
