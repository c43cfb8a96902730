-- 0006: queue history rollup, job search, bulk actions

-- ops-ui: the per-minute queue rollup (pgsched.queue_minutes, read through the
-- view pgsched.queue_history), the BRIN index it reads job_events by, and the
-- grants of rollup_queue_history, find_jobs, cancel_many and retry_many.
--
-- Part 1 must run BEFORE the copied 40_views.sql (the view queue_history
-- reads the table); part 2 AFTER the copied function files and 40_views.sql.

-- == part 1 ==================================================================

ALTER TABLE pgsched.config ADD COLUMN queue_history_retention interval NOT NULL DEFAULT '30 days';

CREATE TABLE pgsched.queue_minutes (
    minute           timestamptz NOT NULL,  -- start of the UTC minute
    queue            text        NOT NULL,
    completed        integer     NOT NULL DEFAULT 0,
    failed           integer     NOT NULL DEFAULT 0,  -- failed runs sent back for another attempt
    dead             integer     NOT NULL DEFAULT 0,
    cancelled        integer     NOT NULL DEFAULT 0,
    retried          integer     NOT NULL DEFAULT 0,  -- dead or cancelled jobs redriven by retry()
    expired          integer     NOT NULL DEFAULT 0,  -- leases that expired
    available        integer,                         -- depth sampled during the minute; NULL: not sampled
    scheduled        integer,
    running          integer,
    oldest_due_age_s double precision,
    lag_p50_s        double precision,                -- start lag (start - due) of the jobs finished
    lag_p95_s        double precision,
    lag_p99_s        double precision,
    run_p50_s        double precision,                -- run time (finish - start) of the jobs finished
    run_p95_s        double precision,
    run_p99_s        double precision,
    rolled_at        timestamptz NOT NULL,
    CONSTRAINT queue_minutes_pkey PRIMARY KEY (minute, queue)
) PARTITION BY RANGE (minute);
COMMENT ON TABLE pgsched.queue_minutes IS
    'Per-minute, per-queue rollup written by pgsched.rollup_queue_history(); read pgsched.queue_history.';
CREATE TABLE pgsched.queue_minutes_default PARTITION OF pgsched.queue_minutes DEFAULT;

CREATE INDEX job_events_at_idx ON pgsched.job_events USING brin (at);



-- functions/_ensure_day_partition.sql
-- _ensure_day_partition
-- contract: makes sure p_parent (job_history, job_events or queue_minutes) has a partition
-- for the UTC day p_day. Rows that landed in the default partition for that
-- day (written while the partition was missing) are moved into the new one
-- before it is attached, so nothing is lost and the attach cannot fail on
-- them. Returns true when it created a partition.
CREATE OR REPLACE FUNCTION pgsched._ensure_day_partition(p_parent text, p_day date)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := p_parent || '_p' || pg_catalog.to_char(p_day, 'YYYYMMDD');
    v_key text := CASE p_parent WHEN 'job_history' THEN 'finished_at' WHEN 'job_events' THEN 'at'
                                WHEN 'queue_minutes' THEN 'minute' END;
    v_from timestamptz := (p_day::timestamp AT TIME ZONE 'UTC');
    v_to timestamptz := ((p_day + 1)::timestamp AT TIME ZONE 'UTC');
BEGIN
    IF v_key IS NULL THEN
        RAISE EXCEPTION 'pgsched: % is not a day-partitioned table', p_parent USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.to_regclass(pg_catalog.format('pgsched.%I', v_name)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE TABLE pgsched.%I (LIKE pgsched.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_name, p_parent);
    -- No row may reach the default partition between the move and the attach.
    EXECUTE pg_catalog.format('LOCK TABLE pgsched.%I IN SHARE MODE', p_parent || '_default');
    EXECUTE pg_catalog.format(
        'WITH moved AS (DELETE FROM pgsched.%I WHERE %I >= $1 AND %I < $2 RETURNING *) '
        'INSERT INTO pgsched.%I SELECT * FROM moved',
        p_parent || '_default', v_key, v_key, v_name) USING v_from, v_to;
    EXECUTE pg_catalog.format(
        'ALTER TABLE pgsched.%I ATTACH PARTITION pgsched.%I FOR VALUES FROM (%L) TO (%L)',
        p_parent, v_name, v_from, v_to);
    RETURN true;
END
$$;


-- functions/cancel_many.sql
-- cancel_many
-- contract: pgsched.cancel for each of p_ids, in one statement and one
-- transaction, in id order (so two bulk calls never deadlock), each id once;
-- returns (job_id, result) with cancel()'s answer per job. It runs with the
-- caller's rights and goes through cancel() itself, so every rule of a single
-- cancel (tenant confinement, fencing on state) holds for each job. At most
-- 10000 ids per call.
CREATE OR REPLACE FUNCTION pgsched.cancel_many(
    p_ids bigint[],
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, result text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF pg_catalog.cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'pgsched: cancel_many takes at most 10000 jobs per call, not %',
            pg_catalog.cardinality(p_ids)
            USING ERRCODE = 'program_limit_exceeded', HINT = 'Call it once per slice of the ids.';
    END IF;
    FOR job_id IN SELECT DISTINCT u.id FROM pg_catalog.unnest(p_ids) AS u(id) WHERE u.id IS NOT NULL ORDER BY u.id
    LOOP
        result := pgsched.cancel(job_id, p_now);
        RETURN NEXT;
    END LOOP;
END
$$;


-- functions/find_jobs.sql
-- find_jobs
-- contract: the jobs, active or finished, matching every filter given (NULL:
-- any), newest id first: the task (exact, or a prefix ending in '*'), states,
-- queue, tenant, args containing p_args (jsonb @>), and a time range
-- [p_since, p_until) on when the job was enqueued (p_time 'created', the
-- default), became due ('due') or finished ('finished': finished jobs only).
-- A finished job appears once, as its latest run, and not at all while a
-- redrive of it is active. Keyset pagination: p_before is the last id of the
-- previous page; p_max_id bounds the set (so a confirmed bulk action touches
-- only the jobs that were there). Runs with the caller's rights: row-level
-- security confines a tenant-bound session to its tenant.
CREATE OR REPLACE FUNCTION pgsched.find_jobs(
    p_task   text        DEFAULT NULL,
    p_states text[]      DEFAULT NULL,
    p_queue  text        DEFAULT NULL,
    p_tenant text        DEFAULT NULL,
    p_args   jsonb       DEFAULT NULL,
    p_since  timestamptz DEFAULT NULL,
    p_until  timestamptz DEFAULT NULL,
    p_time   text        DEFAULT 'created',
    p_before bigint      DEFAULT NULL,
    p_max_id bigint      DEFAULT NULL,
    p_limit  integer     DEFAULT 50
)
RETURNS TABLE (id bigint, queue text, state text, task text, args jsonb, priority integer, attempt integer,
               max_attempts integer, run_at timestamptz, worker text, error text, tenant text,
               created_at timestamptz, finished_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    WITH active AS (
        SELECT j.id, j.queue, j.state::text AS state, j.task, j.args, j.priority, j.attempt, j.max_attempts,
               j.run_at, j.leased_by AS worker, j.last_error AS error, j.tenant, j.created_at,
               NULL::timestamptz AS finished_at
        FROM pgsched.jobs j
        WHERE (p_task IS NULL OR j.task = p_task
               OR (right(p_task, 1) = '*' AND starts_with(j.task, rtrim(p_task, '*'))))
          AND (p_states IS NULL OR j.state::text = ANY(p_states))
          AND (p_queue IS NULL OR j.queue = p_queue)
          AND (p_tenant IS NULL OR j.tenant = p_tenant)
          AND (p_args IS NULL OR j.args @> p_args)
          AND (p_since IS NULL AND p_until IS NULL OR p_time IS DISTINCT FROM 'finished')
          AND (p_since IS NULL OR CASE p_time WHEN 'due' THEN j.run_at ELSE j.created_at END >= p_since)
          AND (p_until IS NULL OR CASE p_time WHEN 'due' THEN j.run_at ELSE j.created_at END < p_until)
          AND (p_before IS NULL OR j.id < p_before)
          AND (p_max_id IS NULL OR j.id <= p_max_id)
        ORDER BY j.id DESC
        LIMIT p_limit
    ), finished AS (
        SELECT h.id, h.queue, h.state::text AS state, h.task, h.args, h.priority, h.attempt, h.max_attempts,
               h.run_at, h.leased_by AS worker, h.error, h.tenant, h.created_at, h.finished_at
        FROM pgsched.job_history h
        WHERE (p_task IS NULL OR h.task = p_task
               OR (right(p_task, 1) = '*' AND starts_with(h.task, rtrim(p_task, '*'))))
          AND (p_states IS NULL OR h.state::text = ANY(p_states))
          AND (p_queue IS NULL OR h.queue = p_queue)
          AND (p_tenant IS NULL OR h.tenant = p_tenant)
          AND (p_args IS NULL OR h.args @> p_args)
          AND (p_since IS NULL OR CASE p_time WHEN 'due' THEN h.run_at WHEN 'finished' THEN h.finished_at
                                  ELSE h.created_at END >= p_since)
          AND (p_until IS NULL OR CASE p_time WHEN 'due' THEN h.run_at WHEN 'finished' THEN h.finished_at
                                  ELSE h.created_at END < p_until)
          AND (p_before IS NULL OR h.id < p_before)
          AND (p_max_id IS NULL OR h.id <= p_max_id)
          AND NOT EXISTS (SELECT 1 FROM pgsched.job_history n WHERE n.id = h.id AND n.finished_at > h.finished_at)
          AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
        ORDER BY h.id DESC
        LIMIT p_limit
    )
    SELECT * FROM (SELECT * FROM active UNION ALL SELECT * FROM finished) found
    ORDER BY found.id DESC
    LIMIT p_limit
$$;


-- functions/maintain.sql
-- maintain
-- contract: the housekeeping that keeps tables small and bounded, safe to run
-- from any number of processes at once (they take turns on a
-- transaction-scoped advisory lock, so it also works through PgBouncer):
-- creates day partitions of job_history, job_events and queue_minutes from yesterday to
-- partitions_ahead days ahead, and for any day whose rows wait in a default
-- partition; drops the partitions older than their retention; forgets
-- idempotency keys whose retention ran out and workers unseen for a day.
-- Returns what it did as one JSON object.
CREATE OR REPLACE FUNCTION pgsched.maintain(p_now timestamptz DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
    v_today date := (v_now AT TIME ZONE 'UTC')::date;
    v_config pgsched.config;
    v_created integer := 0;
    v_dropped text[] := '{}';
    v_keys integer;
    v_workers integer;
    v_part record;
    v_retention interval;
    v_lock_timeout text;
    v_day date;
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgsched.maintain')) THEN
        RETURN pg_catalog.jsonb_build_object('skipped', 'another maintain() is running');
    END IF;
    SELECT * INTO v_config FROM pgsched.config;

    -- Rows written while their day had no partition (maintain() did not run
    -- for a while, or a caller passed a time outside the window) wait in the
    -- default partitions; give their days partitions too, so they are filed
    -- and retention reaches them. Normally the default partitions are empty.
    FOR v_day IN SELECT DISTINCT (h.finished_at AT TIME ZONE 'UTC')::date FROM pgsched.job_history_default h LOOP
        IF pgsched._ensure_day_partition('job_history', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;
    FOR v_day IN SELECT DISTINCT (e.at AT TIME ZONE 'UTC')::date FROM pgsched.job_events_default e LOOP
        IF pgsched._ensure_day_partition('job_events', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;
    FOR v_day IN SELECT DISTINCT (m.minute AT TIME ZONE 'UTC')::date FROM pgsched.queue_minutes_default m LOOP
        IF pgsched._ensure_day_partition('queue_minutes', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;

    FOR d IN -1 .. v_config.partitions_ahead LOOP
        IF pgsched._ensure_day_partition('job_history', v_today + d) THEN v_created := v_created + 1; END IF;
        IF pgsched._ensure_day_partition('job_events', v_today + d) THEN v_created := v_created + 1; END IF;
        IF pgsched._ensure_day_partition('queue_minutes', v_today + d) THEN v_created := v_created + 1; END IF;
    END LOOP;

    -- A partition goes when its whole day is older than the retention.
    FOR v_part IN
        SELECT c.relname, p.relname AS parent,
               pg_catalog.to_date(pg_catalog.right(c.relname, 8), 'YYYYMMDD') AS day
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
        JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
        JOIN pg_catalog.pg_namespace n ON n.oid = p.relnamespace
        WHERE n.nspname = 'pgsched' AND p.relname IN ('job_history', 'job_events', 'queue_minutes')
          AND c.relname ~ '_p[0-9]{8}$'
    LOOP
        v_retention := CASE v_part.parent WHEN 'job_history' THEN v_config.history_retention
                                          WHEN 'queue_minutes' THEN v_config.queue_history_retention
                                          ELSE v_config.events_retention END;
        IF ((v_part.day + 1)::timestamp AT TIME ZONE 'UTC') <= v_now - v_retention THEN
            -- Dropping a partition locks its parent for a moment; never queue
            -- behind a long reader, try again at the next run instead.
            v_lock_timeout := pg_catalog.current_setting('lock_timeout');
            BEGIN
                PERFORM pg_catalog.set_config('lock_timeout', '2s', true);
                EXECUTE pg_catalog.format('DROP TABLE pgsched.%I', v_part.relname);
                v_dropped := v_dropped || v_part.relname::text;
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'pgsched: % is busy; it will be dropped later', v_part.relname;
            END;
            PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
        END IF;
    END LOOP;

    WITH gone AS (
        DELETE FROM pgsched.idempotency_keys k
        WHERE k.key IN (SELECT k2.key FROM pgsched.idempotency_keys k2
                        WHERE k2.expires_at < v_now LIMIT 50000)
        RETURNING 1
    )
    SELECT pg_catalog.count(*) INTO v_keys FROM gone;

    DELETE FROM pgsched.workers w WHERE w.last_seen < v_now - interval '1 day';
    GET DIAGNOSTICS v_workers = ROW_COUNT;

    RETURN pg_catalog.jsonb_build_object(
        'partitions_created', v_created, 'partitions_dropped', pg_catalog.to_jsonb(v_dropped),
        'idempotency_keys_pruned', v_keys, 'workers_pruned', v_workers);
END
$$;


-- functions/retry_many.sql
-- retry_many
-- contract: pgsched.retry for each of p_ids, in one statement and one
-- transaction, in id order (so two bulk calls never deadlock), each id once;
-- returns (job_id, result) with retry()'s answer per job. It runs with the
-- caller's rights and goes through retry() itself, so every rule of a single
-- retry (tenant confinement, one redrive at a time) holds for each job. At most
-- 10000 ids per call.
CREATE OR REPLACE FUNCTION pgsched.retry_many(
    p_ids bigint[],
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, result text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF pg_catalog.cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'pgsched: retry_many takes at most 10000 jobs per call, not %',
            pg_catalog.cardinality(p_ids)
            USING ERRCODE = 'program_limit_exceeded', HINT = 'Call it once per slice of the ids.';
    END IF;
    FOR job_id IN SELECT DISTINCT u.id FROM pg_catalog.unnest(p_ids) AS u(id) WHERE u.id IS NOT NULL ORDER BY u.id
    LOOP
        result := pgsched.retry(job_id, p_now);
        RETURN NEXT;
    END LOOP;
END
$$;


-- functions/rollup_queue_history.sql
-- rollup_queue_history
-- contract: files finished work into pgsched.queue_minutes, one row per
-- (UTC minute, queue): completed, dead, cancelled (from job_history by
-- finished_at), failed runs sent back for a retry, redrives and expired
-- leases (from job_events), start-lag and run-time percentiles of the jobs
-- finished in the minute, and, for the minute p_now falls in, the queue's
-- depth sampled now. Rolls every minute from the last final one (rolled at
-- least 10 s after it ended; at most a day back, or from p_since) up to the
-- minute of p_until (default: now). Idempotent: an upsert keyed by (minute,
-- queue) computed from the source rows, so rolling a minute twice, or from
-- two processes, gives the same counts; a closed minute keeps the depth
-- sampled while it was open. Callers take turns on a transaction-scoped
-- advisory lock (a busy one is skipped), and a default call within 10 s of
-- the last one is skipped too, so scanners and workers can all call it.
CREATE OR REPLACE FUNCTION pgsched.rollup_queue_history(
    p_until timestamptz DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL,
    p_since timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
    v_current timestamptz := pg_catalog.date_trunc('minute', v_now, 'UTC');
    v_to timestamptz := pg_catalog.date_trunc('minute', least(coalesce(p_until, v_now), v_now), 'UTC')
                        + interval '1 minute';
    v_from timestamptz;
    v_rows integer;
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgsched.rollup_queue_history')) THEN
        RETURN pg_catalog.jsonb_build_object('skipped', 'another rollup is running');
    END IF;
    IF p_until IS NULL AND p_since IS NULL AND EXISTS (
        SELECT 1 FROM pgsched.queue_minutes m
        WHERE m.minute = v_current AND m.rolled_at > v_now - interval '10 seconds' AND m.rolled_at <= v_now) THEN
        RETURN pg_catalog.jsonb_build_object('skipped', 'rolled up less than 10 s ago');
    END IF;
    v_from := coalesce(
        pg_catalog.date_trunc('minute', p_since, 'UTC'),
        (SELECT pg_catalog.max(m.minute) + interval '1 minute' FROM pgsched.queue_minutes m
         WHERE m.minute >= v_to - interval '1 day' AND m.minute < v_to
           AND m.rolled_at >= m.minute + interval '70 seconds'),
        v_to - interval '1 day');

    WITH finished AS (
        SELECT pg_catalog.date_trunc('minute', h.finished_at, 'UTC') AS minute, h.queue,
               pg_catalog.count(*) FILTER (WHERE h.state = 'completed') AS completed,
               pg_catalog.count(*) FILTER (WHERE h.state = 'dead') AS dead,
               pg_catalog.count(*) FILTER (WHERE h.state = 'cancelled') AS cancelled,
               pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
                   ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
                   AS lag,
               pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
                   ORDER BY EXTRACT(EPOCH FROM h.finished_at - h.started_at)) FILTER (WHERE h.started_at IS NOT NULL)
                   AS run
        FROM pgsched.job_history h
        WHERE h.finished_at >= v_from AND h.finished_at < v_to
        GROUP BY 1, 2
    ), events AS (
        SELECT pg_catalog.date_trunc('minute', e.at, 'UTC') AS minute, q.queue,
               pg_catalog.count(*) FILTER (WHERE e.kind = 'failed') AS failed,
               pg_catalog.count(*) FILTER (WHERE e.kind = 'retried') AS retried,
               pg_catalog.count(*) FILTER (WHERE e.kind = 'lease_expired') AS expired
        FROM pgsched.job_events e
        -- Events do not carry the queue; the job's row does, active or finished.
        CROSS JOIN LATERAL (
            SELECT coalesce(
                (SELECT j.queue FROM pgsched.jobs j WHERE j.id = e.job_id LIMIT 1),
                (SELECT h.queue FROM pgsched.job_history h WHERE h.id = e.job_id LIMIT 1)) AS queue
        ) q
        WHERE e.at >= v_from AND e.at < v_to AND e.kind IN ('failed', 'retried', 'lease_expired')
          AND q.queue IS NOT NULL
        GROUP BY 1, 2
    ), depth AS (
        SELECT v_current AS minute, j.queue,
               pg_catalog.count(*) FILTER (WHERE j.state = 'available') AS available,
               pg_catalog.count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
               pg_catalog.count(*) FILTER (WHERE j.state = 'running') AS running,
               EXTRACT(EPOCH FROM v_now - pg_catalog.min(j.run_at) FILTER (
                   WHERE j.state = 'available' OR (j.state = 'scheduled' AND j.run_at <= v_now)))::double precision
                   AS oldest_due_age_s
        FROM pgsched.jobs j
        WHERE v_current >= v_from AND v_current < v_to
        GROUP BY j.queue
    ), keys AS (
        SELECT f.minute, f.queue FROM finished f
        UNION SELECT e.minute, e.queue FROM events e
        UNION SELECT d.minute, d.queue FROM depth d
        -- Rows already there are rolled again too (and so become final).
        UNION SELECT m.minute, m.queue FROM pgsched.queue_minutes m WHERE m.minute >= v_from AND m.minute < v_to
    ), upserted AS (
        INSERT INTO pgsched.queue_minutes AS m
            (minute, queue, completed, failed, dead, cancelled, retried, expired,
             available, scheduled, running, oldest_due_age_s,
             lag_p50_s, lag_p95_s, lag_p99_s, run_p50_s, run_p95_s, run_p99_s, rolled_at)
        SELECT k.minute, k.queue, coalesce(f.completed, 0), coalesce(e.failed, 0), coalesce(f.dead, 0),
               coalesce(f.cancelled, 0), coalesce(e.retried, 0), coalesce(e.expired, 0),
               -- The minute being sampled: a queue without active jobs has depth 0.
               CASE WHEN k.minute = v_current THEN coalesce(d.available, 0) END,
               CASE WHEN k.minute = v_current THEN coalesce(d.scheduled, 0) END,
               CASE WHEN k.minute = v_current THEN coalesce(d.running, 0) END,
               CASE WHEN k.minute = v_current THEN coalesce(d.oldest_due_age_s, 0) END,
               f.lag[1], f.lag[2], f.lag[3], f.run[1], f.run[2], f.run[3], v_now
        FROM keys k
        LEFT JOIN finished f ON f.minute = k.minute AND f.queue = k.queue
        LEFT JOIN events e ON e.minute = k.minute AND e.queue = k.queue
        LEFT JOIN depth d ON d.minute = k.minute AND d.queue = k.queue
        ORDER BY k.minute, k.queue
        ON CONFLICT (minute, queue) DO UPDATE
        SET completed = excluded.completed, failed = excluded.failed, dead = excluded.dead,
            cancelled = excluded.cancelled, retried = excluded.retried, expired = excluded.expired,
            available = CASE WHEN excluded.minute = v_current THEN excluded.available ELSE m.available END,
            scheduled = CASE WHEN excluded.minute = v_current THEN excluded.scheduled ELSE m.scheduled END,
            running = CASE WHEN excluded.minute = v_current THEN excluded.running ELSE m.running END,
            oldest_due_age_s = CASE WHEN excluded.minute = v_current THEN excluded.oldest_due_age_s
                                    ELSE m.oldest_due_age_s END,
            lag_p50_s = excluded.lag_p50_s, lag_p95_s = excluded.lag_p95_s, lag_p99_s = excluded.lag_p99_s,
            run_p50_s = excluded.run_p50_s, run_p95_s = excluded.run_p95_s, run_p99_s = excluded.run_p99_s,
            rolled_at = greatest(m.rolled_at, excluded.rolled_at)
        RETURNING 1
    )
    SELECT pg_catalog.count(*) INTO v_rows FROM upserted;
    RETURN pg_catalog.jsonb_build_object('from', v_from, 'until', v_to, 'rows', v_rows);
END
$$;


-- 40_views.sql: the new view only (the others are unchanged)
-- queue_history: the per-minute rollup (see rollup_queue_history), with the
-- rates and failure totals charts draw. Counts are of the minute; depth and
-- the oldest due age were sampled during it (NULL when nobody sampled);
-- percentiles are of the jobs that finished in it. `final` says the minute
-- was rolled up after it ended (its counts will not change).
CREATE VIEW pgsched.queue_history AS
SELECT m.minute, m.queue, m.completed, m.failed, m.dead, m.cancelled, m.retried, m.expired,
       m.failed + m.dead + m.expired AS failures,
       round((m.completed / 60.0)::numeric, 3)::double precision AS completed_per_s,
       m.available, m.scheduled, m.running, m.oldest_due_age_s,
       m.lag_p50_s, m.lag_p95_s, m.lag_p99_s, m.run_p50_s, m.run_p95_s, m.run_p99_s,
       m.rolled_at, m.rolled_at >= m.minute + interval '70 seconds' AS final
FROM pgsched.queue_minutes m;
COMMENT ON VIEW pgsched.queue_history IS
    'Per minute and queue: completed, failed (retried runs), dead, cancelled, redriven, expired leases, sampled depth, start-lag and run-time percentiles (seconds).';

-- == part 2 ==================================================================

REVOKE ALL ON pgsched.queue_minutes FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched.rollup_queue_history, pgsched.cancel_many, pgsched.retry_many,
    pgsched.find_jobs FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.find_jobs TO pgsched_enqueue, pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.rollup_queue_history TO pgsched_worker;
GRANT SELECT ON pgsched.queue_minutes, pgsched.queue_history TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.cancel_many, pgsched.retry_many TO pgsched_admin;
ALTER VIEW pgsched.queue_history SET (security_invoker = true);
ALTER TABLE pgsched.queue_minutes ENABLE ROW LEVEL SECURITY;
CREATE POLICY queue_minutes_unscoped ON pgsched.queue_minutes
    USING (pgsched._tenant_visible(NULL));

-- Day partitions of queue_minutes from yesterday on, as a fresh install has.
SELECT pgsched.maintain();
