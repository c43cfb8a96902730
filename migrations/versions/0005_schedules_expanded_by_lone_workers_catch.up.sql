-- 0005: schedules expanded by lone workers, catch-up policies, validated schedules

-- functions/_valid_timezone.sql
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


-- functions/_cron_value.sql
-- _cron_value
-- contract: one plain value of cron field p_field (see _cron_field): a number
-- within the field's range, or a month / weekday name where the field takes
-- names. Raises invalid_parameter_value otherwise.
CREATE OR REPLACE FUNCTION pgsched._cron_value(p_value text, p_field integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := (ARRAY['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'])[p_field + 1];
    v_lo integer := (ARRAY[0, 0, 0, 1, 1, 0])[p_field + 1];
    v_hi integer := (ARRAY[59, 59, 23, 31, 12, 7])[p_field + 1];
    v_at integer;
BEGIN
    IF p_field = 4 THEN
        v_at := pg_catalog.array_position('{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}'::text[], p_value);
        IF v_at IS NOT NULL THEN
            RETURN v_at;
        END IF;
    ELSIF p_field = 5 THEN
        v_at := pg_catalog.array_position('{SUN,MON,TUE,WED,THU,FRI,SAT}'::text[], p_value);
        IF v_at IS NOT NULL THEN
            RETURN v_at - 1;
        END IF;
    END IF;
    IF p_value !~ '^[0-9]+$' THEN
        RAISE EXCEPTION 'pgsched: cannot parse % field: % is not a number%', v_name, pg_catalog.quote_literal(p_value),
            CASE p_field WHEN 4 THEN ' or JAN-DEC' WHEN 5 THEN ' or SUN-SAT' ELSE '' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_value::numeric NOT BETWEEN v_lo AND v_hi THEN
        RAISE EXCEPTION 'pgsched: % must be %-%, got %', v_name, v_lo, v_hi, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN p_value::integer;
END
$$;


-- functions/_cron_field.sql
-- _cron_field
-- contract: the values one field of a cron expression names, parsed by the
-- rules cron.py applies (cronsim's): '*', numbers, ranges 'a-b', steps '/n',
-- lists, JAN-DEC in the month field, SUN-SAT and 'nL' / 'd#n' in the
-- day-of-week field, 'L' and 'LW' in the day-of-month field (-1000 / -1001).
-- p_field is 0 second, 1 minute, 2 hour, 3 day-of-month, 4 month,
-- 5 day-of-week. Raises invalid_parameter_value naming the field and what is
-- wrong, so SQL refuses exactly what the Python side cannot parse.
CREATE OR REPLACE FUNCTION pgsched._cron_field(p_token text, p_field integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := (ARRAY['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'])[p_field + 1];
    v_lo integer := (ARRAY[0, 0, 0, 1, 1, 0])[p_field + 1];
    v_hi integer := (ARRAY[59, 59, 23, 31, 12, 7])[p_field + 1];
    v_token text := pg_catalog.upper(p_token);
    v_term text;
    v_rest text;
    v_step integer;
    v_items integer[] := '{}';
    v_first integer;
    v_last integer;
BEGIN
    IF v_token = '*' THEN
        RETURN ARRAY(SELECT pg_catalog.generate_series(v_lo, v_hi));
    END IF;
    IF pg_catalog.strpos(v_token, ',') > 0 THEN
        FOREACH v_term IN ARRAY pg_catalog.string_to_array(v_token, ',') LOOP
            v_items := v_items || pgsched._cron_field(v_term, p_field);
        END LOOP;
        RETURN v_items;
    END IF;
    IF p_field = 5 AND pg_catalog.strpos(v_token, 'L') > 0 THEN
        v_term := pg_catalog.left(v_token, -1);
        IF v_term !~ '^[0-9]+$' THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: "nL" (the last such weekday) takes a day number',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY[pgsched._cron_value(v_term, p_field)];
    END IF;
    IF p_field = 5 AND pg_catalog.strpos(v_token, '#') > 0 THEN
        v_term := pg_catalog.split_part(v_token, '#', 1);
        v_rest := pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '#') + 1);
        IF v_rest !~ '^[0-9]+$' OR v_rest::numeric NOT BETWEEN 1 AND 5 THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: "d#n" takes n from 1 to 5',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY[pgsched._cron_value(v_term, p_field)];
    END IF;
    IF pg_catalog.strpos(v_token, '/') > 0 THEN
        v_term := pg_catalog.split_part(v_token, '/', 1);
        v_rest := pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '/') + 1);
        IF v_rest !~ '^[0-9]+$' OR v_rest::numeric = 0 OR v_rest::numeric > 1000000 THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: the step after / must be a positive number',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_step := v_rest::integer;
        v_items := pgsched._cron_field(v_term, p_field);
        IF v_items IN (ARRAY[-1000], ARRAY[-1001]) THEN
            RETURN v_items;
        END IF;
        IF pg_catalog.cardinality(v_items) = 1 THEN
            RETURN ARRAY(SELECT pg_catalog.generate_series(v_items[1], v_hi, v_step));
        END IF;
        RETURN ARRAY(SELECT d.v FROM (SELECT u.v, pg_catalog.row_number() OVER (ORDER BY u.v) AS n
                                      FROM (SELECT DISTINCT x AS v FROM pg_catalog.unnest(v_items) x) u) d
                     WHERE (d.n - 1) % v_step = 0 ORDER BY d.v);
    END IF;
    IF pg_catalog.strpos(v_token, '-') > 0 THEN
        v_first := pgsched._cron_value(pg_catalog.split_part(v_token, '-', 1), p_field);
        v_last := pgsched._cron_value(pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '-') + 1), p_field);
        IF v_last < v_first THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: a range goes from low to high',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY(SELECT pg_catalog.generate_series(v_first, v_last));
    END IF;
    IF p_field = 3 AND v_token = 'LW' THEN
        RETURN ARRAY[-1001];
    END IF;
    IF p_field = 3 AND v_token = 'L' THEN
        RETURN ARRAY[-1000];
    END IF;
    RETURN ARRAY[pgsched._cron_value(v_token, p_field)];
END
$$;


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
-- The zone is checked by the table (schedules_timezone_valid). Raises
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


-- functions/acquire_idle_shards.sql
-- acquire_idle_shards
-- contract: the shard leases of a worker that expands schedules while no
-- scanner does (`pgsched worker` alone fires schedules). While no scanner is
-- live (none seen within `lease`), renews the leases `holder` has and takes
-- every shard nobody holds (free or expired), raising its epoch, exactly as
-- acquire_shards does; writes go through the same fence (_hold_shard). As soon
-- as a scanner is live it gives all of them back, so scanners take over at
-- their next renewal. Unlike a scanner, the holder is not recorded in
-- pgsched.scanners: it never counts in the scanners' fair shares. Returns the
-- shards held afterwards with their epochs and expiry.
CREATE OR REPLACE FUNCTION pgsched.acquire_idle_shards(
    holder text,
    lease  interval    DEFAULT '10 seconds',
    p_now  timestamptz DEFAULT NULL
)
RETURNS TABLE (shard smallint, epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
BEGIN
    IF acquire_idle_shards.lease IS NULL OR acquire_idle_shards.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: the lease must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF acquire_idle_shards.holder IS NULL
       OR EXISTS (SELECT 1 FROM pgsched.scanners s WHERE s.name = acquire_idle_shards.holder) THEN
        RAISE EXCEPTION 'pgsched: % is a scanner name; idle shards are held under another name',
            coalesce(acquire_idle_shards.holder, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF EXISTS (SELECT 1 FROM pgsched.scanners s WHERE s.last_seen > v_now - acquire_idle_shards.lease) THEN
        UPDATE pgsched.shard_leases l
        SET owner = NULL, expires_at = NULL, renewed_at = v_now
        WHERE l.owner = acquire_idle_shards.holder;
        RETURN;
    END IF;

    UPDATE pgsched.shard_leases l
    SET expires_at = v_now + acquire_idle_shards.lease, renewed_at = v_now,
        epoch = CASE WHEN l.expires_at > v_now THEN l.epoch ELSE l.epoch + 1 END
    WHERE l.owner = acquire_idle_shards.holder;

    UPDATE pgsched.shard_leases l
    SET owner = acquire_idle_shards.holder, epoch = l.epoch + 1,
        expires_at = v_now + acquire_idle_shards.lease, renewed_at = v_now
    WHERE l.shard IN (
        SELECT l2.shard FROM pgsched.shard_leases l2
        WHERE l2.owner IS NULL OR l2.expires_at <= v_now
        ORDER BY l2.shard
        FOR UPDATE SKIP LOCKED);

    RETURN QUERY
    SELECT l.shard, l.epoch, l.expires_at
    FROM pgsched.shard_leases l
    WHERE l.owner = acquire_idle_shards.holder
    ORDER BY l.shard;
END
$$;


-- functions/promote_due.sql
-- promote_due
-- contract: makes scheduled jobs whose run_at has come 'available' and wakes
-- workers of their queues (one NOTIFY per queue). Reads only due rows of the
-- scheduled index, so a backlog of far-future jobs costs nothing. Returns the
-- number promoted (at most p_limit; call again while it is p_limit).
--
-- Occurrences of recurring schedules (docs/schedules.md) first meet the
-- misfire policy when they are missed (due more than misfire_grace ago, as
-- nothing promoted them in time): 'skip' drops every missed one, 'latest'
-- keeps the most recent missed one, 'all' the misfire_cap most recent missed
-- ones; on-time occurrences never count against the cap and are never
-- dropped by it. A missed occurrence is decided once (its occurrence row says
-- 'misfire_fired' or 'skipped_misfire'), and, while the schedule is enabled,
-- not before it is expanded up to now, so the policy sees the whole missed
-- window. Then the
-- concurrency policy, when another run of the schedule is queued or running:
-- 'allow' promotes anyway; under 'skip', 'queue' and 'replace' the catch-up
-- runs ('misfire_fired') go one after another, each waiting for the previous
-- one, and are never skipped or replaced; the first on-time occurrence due
-- during catch-up waits behind it ('queued') and runs next. Otherwise 'skip'
-- cancels the occurrence, 'queue' keeps one occurrence waiting and skips the
-- rest, 'replace' cancels the previous run and promotes this one. A waiting
-- occurrence keeps its run_at (its fire time, ctx.scheduled_at) and is looked
-- at again at every call. Each decision is recorded in
-- pgsched.schedule_occurrences.
CREATE OR REPLACE FUNCTION pgsched.promote_due(
    p_now   timestamptz DEFAULT NULL,
    p_limit integer     DEFAULT 10000,
    p_shard integer     DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
    v_count integer;
    v_queues text[];
    v_occ record;
    v_policy text;
    v_sched record;
    v_later integer;
    v_skip text;
    v_busy boolean;
    v_job pgsched.jobs;
    v_prev record;
    v_decision text;
    v_waiting text[] := '{}';
BEGIN
    WITH due AS MATERIALIZED (
        SELECT j.id, j.shard
        FROM pgsched.jobs j
        WHERE j.state = 'scheduled' AND j.run_at <= v_now AND j.schedule IS NULL
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.run_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), promoted AS (
        UPDATE pgsched.jobs j
        SET state = 'available'
        FROM due
        WHERE j.id = due.id AND j.shard = due.shard AND j.state = 'scheduled' AND j.run_at <= v_now
        RETURNING j.queue
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT p.queue)
    INTO v_count, v_queues
    FROM promoted p;

    -- Schedule occurrences: few per tick, one at a time in due order.
    FOR v_occ IN
        SELECT j.id, j.shard, j.schedule, j.run_at, j.queue
        FROM pgsched.jobs j
        WHERE j.state = 'scheduled' AND j.run_at <= v_now AND j.schedule IS NOT NULL
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        -- A later occurrence of a schedule already found waiting waits too (catch-up, or queued).
        SELECT o.decision INTO v_decision FROM pgsched.schedule_occurrences o
        WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
        IF v_occ.schedule = ANY(v_waiting) AND v_decision IN ('misfire_fired', 'queued') THEN
            CONTINUE;
        END IF;
        SELECT s.concurrency, s.misfire_policy, s.misfire_cap, s.misfire_grace, s.expanded_until, s.enabled
        INTO v_sched
        FROM pgsched.schedules s WHERE s.name = v_occ.schedule;
        v_policy := coalesce(v_sched.concurrency, 'allow');

        IF v_decision = 'fire' AND v_occ.run_at < v_now - v_sched.misfire_grace THEN
            IF v_sched.enabled AND (v_sched.expanded_until IS NULL OR v_sched.expanded_until < v_now) THEN
                CONTINUE;  -- not expanded up to now: decide once the whole missed window is known
            END IF;
            -- Later missed occurrences still to run (on-time or queued ones do not count).
            SELECT pg_catalog.count(*) INTO v_later
            FROM pgsched.jobs w
            JOIN pgsched.schedule_occurrences o
              ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
            WHERE w.schedule = v_occ.schedule AND w.state IN ('scheduled', 'available', 'running')
              AND w.run_at < v_now - v_sched.misfire_grace AND (w.run_at, w.id) > (v_occ.run_at, v_occ.id)
              AND o.decision IN ('fire', 'misfire_fired');
            IF v_sched.misfire_policy = 'skip'
               OR (v_sched.misfire_policy = 'latest' AND v_later > 0)
               OR (v_sched.misfire_policy = 'all' AND v_later >= v_sched.misfire_cap) THEN
                v_skip := pg_catalog.format('misfire policy %s: due at %s, missed by more than %s',
                                            v_sched.misfire_policy, v_occ.run_at, v_sched.misfire_grace);
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now, 'skipped: ' || v_skip);
                    UPDATE pgsched.schedule_occurrences o
                    SET decision = 'skipped_misfire', decided_at = v_now, reason = v_skip
                    WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
                END IF;
                CONTINUE;
            END IF;
            v_decision := 'misfire_fired';
            UPDATE pgsched.schedule_occurrences o
            SET decision = 'misfire_fired', decided_at = v_now,
                reason = pg_catalog.format('missed (due %s, nothing promoted it in time); misfire policy %s',
                                           v_occ.run_at, v_sched.misfire_policy)
            WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
        END IF;

        v_busy := v_policy <> 'allow' AND EXISTS (
            SELECT 1 FROM pgsched.jobs o
            WHERE o.schedule = v_occ.schedule AND o.id <> v_occ.id AND o.state IN ('available', 'running'));

        IF NOT v_busy THEN
            UPDATE pgsched.jobs j SET state = 'available'
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled';
            v_queues := pg_catalog.array_append(v_queues, v_occ.queue);
            v_count := v_count + 1;
        ELSIF v_decision IN ('misfire_fired', 'queued') THEN
            -- Catch-up goes one run after another; a queued occurrence waits its turn.
            v_waiting := pg_catalog.array_append(v_waiting, v_occ.schedule);
        ELSIF v_policy = 'queue' OR EXISTS (
                SELECT 1 FROM pgsched.jobs w
                JOIN pgsched.schedule_occurrences o
                  ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
                WHERE w.schedule = v_occ.schedule AND w.id <> v_occ.id
                  AND w.state IN ('scheduled', 'available', 'running') AND o.decision = 'misfire_fired') THEN
            -- Queue, or catch-up in progress: one occurrence waits, the others are skipped.
            IF EXISTS (
                SELECT 1 FROM pgsched.jobs w
                JOIN pgsched.schedule_occurrences o
                  ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
                WHERE w.schedule = v_occ.schedule AND w.id <> v_occ.id AND w.state = 'scheduled'
                  AND o.decision = 'queued') THEN
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now,
                        'skipped: one occurrence of this schedule is already queued');
                    UPDATE pgsched.schedule_occurrences o
                    SET decision = 'skipped_overlap', decided_at = v_now,
                        reason = pg_catalog.format('concurrency policy %s: another occurrence is already waiting',
                                                   v_policy)
                    WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
                END IF;
            ELSE
                UPDATE pgsched.schedule_occurrences o
                SET decision = 'queued', decided_at = v_now,
                    reason = pg_catalog.format('concurrency policy %s: waiting for the previous run%s', v_policy,
                                               CASE WHEN v_policy = 'queue' THEN '' ELSE ' (catch-up in progress)' END)
                WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
                v_waiting := pg_catalog.array_append(v_waiting, v_occ.schedule);
            END IF;
        ELSIF v_policy = 'skip' THEN
            DELETE FROM pgsched.jobs j
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
            RETURNING j.* INTO v_job;
            IF FOUND THEN
                PERFORM pgsched._finish(v_job, 'cancelled', v_now,
                    'skipped: the previous run of this schedule was still going');
                UPDATE pgsched.schedule_occurrences o
                SET decision = 'skipped_overlap', decided_at = v_now,
                    reason = 'concurrency policy skip: previous run still going'
                WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
            END IF;
        ELSE  -- replace
            FOR v_prev IN
                SELECT o.id, o.shard FROM pgsched.jobs o
                WHERE o.schedule = v_occ.schedule AND o.id <> v_occ.id AND o.state IN ('available', 'running')
                ORDER BY o.id
            LOOP
                -- Not started yet: filed as cancelled with the reason; running: asked to stop.
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_prev.id AND j.shard = v_prev.shard AND j.state = 'available'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now, pg_catalog.format(
                        'replaced by the occurrence due at %s (concurrency policy replace)', v_occ.run_at));
                ELSE
                    PERFORM pgsched.cancel(v_prev.id, v_now);
                END IF;
            END LOOP;
            UPDATE pgsched.jobs j SET state = 'available'
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled';
            UPDATE pgsched.schedule_occurrences o
            SET decision = 'replaced_previous', decided_at = v_now,
                reason = 'concurrency policy replace: previous run cancelled'
            WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
            v_queues := pg_catalog.array_append(v_queues, v_occ.queue);
            v_count := v_count + 1;
        END IF;
    END LOOP;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM (SELECT DISTINCT q FROM unnest(v_queues) q) d;
    RETURN v_count;
END
$$;


-- functions/scan_shard.sql
-- scan_shard
-- contract: one scanner pass over one shard it holds (fenced by owner and
-- epoch, see _hold_shard): expires dead workers' leases, promotes due jobs
-- (waking workers), and says when the shard's next scheduled job is due so the
-- scanner can sleep until exactly then: an occurrence still waiting after
-- promotion (for the previous run of its schedule) is looked at again a
-- second later. Raises PS409 when the lease is gone.
CREATE OR REPLACE FUNCTION pgsched.scan_shard(
    scanner text,
    shard   integer,
    epoch   bigint,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (expired integer, promoted integer, next_due timestamptz, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
    v_expired integer;
    v_promoted integer;
    v_next timestamptz;
BEGIN
    PERFORM pgsched._hold_shard(scan_shard.scanner, scan_shard.shard, scan_shard.epoch, v_now);
    v_expired := pgsched.expire_leases(v_now, 1000, scan_shard.shard);
    v_promoted := pgsched.promote_due(v_now, 10000, scan_shard.shard);
    v_next := pgsched.next_due(scan_shard.shard);
    IF v_promoted < 10000 AND v_next <= v_now THEN
        v_next := v_now + interval '1 second';
    END IF;
    RETURN QUERY SELECT v_expired, v_promoted, v_next, pg_catalog.clock_timestamp();
END
$$;


-- functions/tg_schedules__before_write.sql
-- tg_schedules__before_write
-- contract: a schedule lives on the shard of its name; any change to what a
-- schedule fires (cron, zone, task, args, queue, policies, enabled...) bumps
-- its version, so the next scan withdraws the occurrences expanded under the
-- old version and expands the new one. Works for plain INSERT/UPDATE too,
-- which are refused what upsert_schedule refuses (_check_schedule).
CREATE OR REPLACE FUNCTION pgsched.tg_schedules__before_write()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
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


-- functions/upsert_schedule.sql
-- upsert_schedule
-- contract: creates the schedule `name`, or updates it when it exists (an
-- update that changes what it fires takes effect at the next scan: future
-- occurrences expanded under the old definition are withdrawn and replaced).
-- Returns the schedule's version afterwards. Refuses (with the reason) a
-- schedule that could never be expanded: see _check_schedule.
CREATE OR REPLACE FUNCTION pgsched.upsert_schedule(
    name           text,
    cron           text,
    task           text,
    args           jsonb    DEFAULT '{}',
    timezone       text     DEFAULT 'UTC',
    queue          text     DEFAULT 'default',
    priority       integer  DEFAULT 0,
    max_attempts   integer  DEFAULT NULL,
    gap_policy     text     DEFAULT 'run',
    overlap_policy text     DEFAULT 'once',
    misfire_policy text     DEFAULT 'latest',
    misfire_cap    integer  DEFAULT 100,
    misfire_grace  interval DEFAULT '1 minute',
    concurrency    text     DEFAULT 'skip',
    enabled        boolean  DEFAULT true,
    horizon        interval DEFAULT '1 hour',
    labels         text[]   DEFAULT '{}',
    tenant         text     DEFAULT NULL,
    source         text     DEFAULT 'sql'
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT pgsched._check_schedule(upsert_schedule.cron, upsert_schedule.priority, upsert_schedule.max_attempts,
                                   upsert_schedule.labels, upsert_schedule.tenant, upsert_schedule.args);
    INSERT INTO pgsched.schedules AS s
        (name, cron, task, args, timezone, queue, priority, max_attempts, gap_policy, overlap_policy,
         misfire_policy, misfire_cap, misfire_grace, concurrency, enabled, horizon, labels, tenant, source, shard)
    VALUES (upsert_schedule.name, upsert_schedule.cron, upsert_schedule.task, coalesce(upsert_schedule.args, '{}'),
            coalesce(upsert_schedule.timezone, 'UTC'), coalesce(upsert_schedule.queue, 'default'),
            coalesce(upsert_schedule.priority, 0), upsert_schedule.max_attempts,
            coalesce(upsert_schedule.gap_policy, 'run'), coalesce(upsert_schedule.overlap_policy, 'once'),
            coalesce(upsert_schedule.misfire_policy, 'latest'), coalesce(upsert_schedule.misfire_cap, 100),
            coalesce(upsert_schedule.misfire_grace, interval '1 minute'),
            coalesce(upsert_schedule.concurrency, 'skip'), coalesce(upsert_schedule.enabled, true),
            coalesce(upsert_schedule.horizon, interval '1 hour'), coalesce(upsert_schedule.labels, '{}'),
            upsert_schedule.tenant, coalesce(upsert_schedule.source, 'sql'), 0)
    ON CONFLICT (name) DO UPDATE
    SET cron = EXCLUDED.cron, task = EXCLUDED.task, args = EXCLUDED.args, timezone = EXCLUDED.timezone,
        queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
        gap_policy = EXCLUDED.gap_policy, overlap_policy = EXCLUDED.overlap_policy,
        misfire_policy = EXCLUDED.misfire_policy, misfire_cap = EXCLUDED.misfire_cap,
        misfire_grace = EXCLUDED.misfire_grace,
        concurrency = EXCLUDED.concurrency, enabled = EXCLUDED.enabled, horizon = EXCLUDED.horizon,
        labels = EXCLUDED.labels, tenant = EXCLUDED.tenant, source = EXCLUDED.source
    RETURNING s.version
$$;

-- sched: schedules expanded by workers when no scanner runs; schedules validated at write.
-- New private helpers and the workers' idle-shard leases (function bodies come from sql/functions/).
REVOKE EXECUTE ON FUNCTION pgsched.acquire_idle_shards(text, interval, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched._check_schedule(text, integer, integer, text[], text, jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched._cron_field(text, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched._cron_value(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.acquire_idle_shards(text, interval, timestamptz) TO pgsched_worker;
