-- _check_schedule_names
-- contract: refuses, before the row is written and with what is wrong, a
-- schedule name, task name or time zone the schedules table's CHECKs would
-- refuse with a bare constraint name and a dump of the row
-- (schedules_name_valid, schedules_task_valid, schedules_timezone_valid).
-- Raises check_violation naming the constraint; the CHECKs stay as the last
-- word. tg_schedules__before_write calls it, so upsert_schedule and a plain
-- INSERT or UPDATE say the same.
CREATE OR REPLACE FUNCTION pgsched._check_schedule_names(p_name text, p_task text, p_timezone text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$' THEN
        RAISE EXCEPTION 'pgsched: invalid schedule name %: 1 to 128 letters, digits, _ . : or -, starting with a '
                        'letter, digit or _ (schedules_name_valid)', coalesce(pg_catalog.quote_literal(p_name), 'NULL')
            USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_name_valid',
                  SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    IF p_task IS NULL OR p_task !~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$' THEN
        RAISE EXCEPTION 'pgsched: invalid task name % for schedule %: 1 to 200 letters, digits, _ . : or -, '
                        'starting with a letter or _ (schedules_task_valid)',
            coalesce(pg_catalog.quote_literal(p_task), 'NULL'), pg_catalog.quote_literal(p_name)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_task_valid',
                  SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    IF NOT pgsched._valid_timezone(p_timezone) THEN
        RAISE EXCEPTION 'pgsched: unknown time zone % for schedule %: give an IANA zone name such as '
                        '''Europe/Berlin'', ''America/New_York'' or ''UTC'' (not an offset, not ''localtime'') '
                        '(schedules_timezone_valid)',
            coalesce(pg_catalog.quote_literal(p_timezone), 'NULL'), pg_catalog.quote_literal(p_name)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_timezone_valid',
                  SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
END
$$;
