-- 0006 down: queue history rollup, job search, bulk actions

DROP VIEW IF EXISTS pgsched.queue_history;
DROP TABLE IF EXISTS pgsched.queue_minutes CASCADE;
DROP INDEX IF EXISTS pgsched.job_events_at_idx;
ALTER TABLE pgsched.config DROP COLUMN IF EXISTS queue_history_retention;

-- functions/_ensure_day_partition.sql as of the previous revision
-- _ensure_day_partition
-- contract: makes sure p_parent (job_history or job_events) has a partition
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
    v_key text := CASE p_parent WHEN 'job_history' THEN 'finished_at' WHEN 'job_events' THEN 'at' END;
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


DROP FUNCTION IF EXISTS pgsched.cancel_many(bigint[], timestamptz);
DROP FUNCTION IF EXISTS pgsched.find_jobs(text, text[], text, text, jsonb, timestamptz, timestamptz, text, bigint, bigint, integer);
-- functions/maintain.sql as of the previous revision
-- maintain
-- contract: the housekeeping that keeps tables small and bounded, safe to run
-- from any number of processes at once (they take turns on a
-- transaction-scoped advisory lock, so it also works through PgBouncer):
-- creates day partitions of job_history and job_events from yesterday to
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

    FOR d IN -1 .. v_config.partitions_ahead LOOP
        IF pgsched._ensure_day_partition('job_history', v_today + d) THEN v_created := v_created + 1; END IF;
        IF pgsched._ensure_day_partition('job_events', v_today + d) THEN v_created := v_created + 1; END IF;
    END LOOP;

    -- A partition goes when its whole day is older than the retention.
    FOR v_part IN
        SELECT c.relname, p.relname AS parent,
               pg_catalog.to_date(pg_catalog.right(c.relname, 8), 'YYYYMMDD') AS day
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
        JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
        JOIN pg_catalog.pg_namespace n ON n.oid = p.relnamespace
        WHERE n.nspname = 'pgsched' AND p.relname IN ('job_history', 'job_events')
          AND c.relname ~ '_p[0-9]{8}$'
    LOOP
        v_retention := CASE v_part.parent WHEN 'job_history' THEN v_config.history_retention
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


DROP FUNCTION IF EXISTS pgsched.retry_many(bigint[], timestamptz);
DROP FUNCTION IF EXISTS pgsched.rollup_queue_history(timestamptz, timestamptz, timestamptz);
