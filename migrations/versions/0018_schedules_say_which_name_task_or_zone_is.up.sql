-- 0018: Schedules say which name, task or zone is wrong

-- functions/_check_schedule.sql
-- _check_schedule
-- contract: refuses a schedule that could never be expanded, before it is
-- written, so one bad schedule cannot fail the scanners' passes: the job
-- table's rules for what its occurrences carry (priority within +-1,000,000,
-- labels without NULL, tenant of 1-200 characters, args within
-- max_payload_bytes, max_attempts > 0), and a cron expression that cron.py
-- parses (5 fields, or 6 with seconds first; each field within its range;
-- Vixie's macros @yearly/@annually, @monthly, @weekly, @daily/@midnight and
-- @hourly; never @reboot) and that can fire at all ('0 0 30 2 *' cannot).
-- The names and the zone: _check_schedule_names, from the table's trigger. Raises
-- check_violation naming the schedules_* constraint, or
-- invalid_parameter_value for a cron expression, with what is wrong.
CREATE OR REPLACE FUNCTION pgsched._check_schedule(
    p_cron         text,
    p_priority     integer,
    p_max_attempts integer,
    p_labels       text[],
    p_tenant       text,
    p_args         jsonb
)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_expr text := pg_catalog.btrim(coalesce(p_cron, ''), E' \t\r\n');
    v_fields text[];
    v_days integer[];
    v_months integer[];
    v_limit integer;
BEGIN
    IF p_priority NOT BETWEEN -1000000 AND 1000000 THEN
        RAISE EXCEPTION 'pgsched: schedule priority % is outside -1000000..1000000 (schedules_priority_range)',
            p_priority USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_priority_range',
                             SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    IF p_max_attempts < 1 THEN
        RAISE EXCEPTION 'pgsched: schedule max_attempts must be at least 1, got % (schedules_max_attempts_positive)',
            p_max_attempts USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_max_attempts_positive',
                                 SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    IF p_tenant IS NOT NULL AND pg_catalog.length(p_tenant) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'pgsched: a schedule tenant is 1 to 200 characters, or NULL for none (schedules_tenant_length)'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_tenant_length',
                  SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    PERFORM pgsched._check_labels(p_labels);
    SELECT c.max_payload_bytes INTO v_limit FROM pgsched.config c;
    PERFORM pgsched._check_payload(p_args, coalesce(v_limit, 1048576));

    IF v_expr LIKE '@%' THEN
        v_expr := CASE pg_catalog.lower(v_expr)
            WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *'
            WHEN '@monthly' THEN '0 0 1 * *' WHEN '@weekly' THEN '0 0 * * 0'
            WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
            WHEN '@hourly' THEN '0 * * * *' END;
        IF v_expr IS NULL THEN
            RAISE EXCEPTION 'pgsched: invalid cron expression %: the only macros are @yearly, @annually, @monthly, '
                            '@weekly, @daily, @midnight and @hourly (@reboot names no instant)',
                pg_catalog.quote_literal(p_cron) USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    v_fields := pg_catalog.regexp_split_to_array(v_expr, E'[ \t\r\n]+');
    IF v_expr = '' OR pg_catalog.cardinality(v_fields) NOT IN (5, 6) THEN
        RAISE EXCEPTION 'pgsched: invalid cron expression %: expected 5 fields (minute hour day-of-month month '
                        'day-of-week) or 6 with seconds first', pg_catalog.quote_literal(p_cron)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(v_fields) = 5 THEN
        v_fields := '0'::text || v_fields;
    END IF;
    FOR i IN 0..5 LOOP
        IF i = 3 THEN
            v_days := pgsched._cron_field(v_fields[i + 1], i);
        ELSIF i = 4 THEN
            v_months := pgsched._cron_field(v_fields[i + 1], i);
        ELSE
            PERFORM pgsched._cron_field(v_fields[i + 1], i);
        END IF;
    END LOOP;
    -- Day-of-month and day-of-week both restricted: either matches (it fires). Otherwise some
    -- month named must have one of the days named (February counts 29).
    IF (v_fields[4] LIKE '*%' OR v_fields[6] LIKE '*%')
       AND (SELECT pg_catalog.min(d) FROM pg_catalog.unnest(v_days) d) >
           (SELECT pg_catalog.max((ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[m])
            FROM pg_catalog.unnest(v_months) m) THEN
        RAISE EXCEPTION 'pgsched: cron expression % can never fire: day % does not occur in month %',
            pg_catalog.quote_literal(p_cron), v_fields[4], v_fields[5] USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;


-- functions/_check_schedule_names.sql
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


-- functions/tg_schedules__before_write.sql
-- tg_schedules__before_write
-- contract: a schedule lives on the shard of its name; any change to what a
-- schedule fires (cron, zone, task, args, queue, policies, enabled...) bumps
-- its version, so the next scan withdraws the occurrences expanded under the
-- old version and expands the new one. Works for plain INSERT/UPDATE too,
-- which are refused what upsert_schedule refuses (_check_schedule,
-- _check_schedule_names; and the command task, _check_command_task)
-- (SECURITY DEFINER: pgsched_admin writes the table but not the helpers).
CREATE OR REPLACE FUNCTION pgsched.tg_schedules__before_write()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_command_task(NEW.task, 'a schedule');
    IF TG_OP = 'INSERT' OR (NEW.name, NEW.task, NEW.timezone) IS DISTINCT FROM (OLD.name, OLD.task, OLD.timezone) THEN
        PERFORM pgsched._check_schedule_names(NEW.name, NEW.task, NEW.timezone);
    END IF;
    IF TG_OP = 'INSERT' OR (NEW.cron, NEW.priority, NEW.max_attempts, NEW.labels, NEW.tenant, NEW.args)
                           IS DISTINCT FROM (OLD.cron, OLD.priority, OLD.max_attempts, OLD.labels, OLD.tenant, OLD.args) THEN
        PERFORM pgsched._check_schedule(NEW.cron, NEW.priority, NEW.max_attempts, NEW.labels, NEW.tenant, NEW.args);
    END IF;
    NEW.shard := pgsched._shard_for_key(NEW.name);
    IF TG_OP = 'INSERT' THEN
        NEW.version := 1;
        NEW.expanded_version := 0;
        NEW.expanded_until := NULL;
        RETURN NEW;
    END IF;
    IF NEW.name <> OLD.name THEN
        RAISE EXCEPTION 'pgsched: a schedule cannot be renamed; remove it and add it again'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF (NEW.cron, NEW.timezone, NEW.task, NEW.args, NEW.queue, NEW.priority, NEW.max_attempts, NEW.labels,
        NEW.tenant, NEW.gap_policy, NEW.overlap_policy, NEW.misfire_policy, NEW.misfire_cap, NEW.misfire_grace, NEW.concurrency,
        NEW.enabled, NEW.horizon)
       IS DISTINCT FROM
       (OLD.cron, OLD.timezone, OLD.task, OLD.args, OLD.queue, OLD.priority, OLD.max_attempts, OLD.labels,
        OLD.tenant, OLD.gap_policy, OLD.overlap_policy, OLD.misfire_policy, OLD.misfire_cap, OLD.misfire_grace, OLD.concurrency,
        OLD.enabled, OLD.horizon) THEN
        NEW.version := OLD.version + 1;
        NEW.updated_at := pg_catalog.now();
        NEW.last_error := NULL;
    END IF;
    RETURN NEW;
END
$$;


-- a new helper: only the owner's functions call it
REVOKE EXECUTE ON FUNCTION pgsched._check_schedule_names(text, text, text) FROM PUBLIC;
