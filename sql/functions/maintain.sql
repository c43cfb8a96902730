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
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
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
        WHERE (k.key, k.job_id) IN (SELECT k2.key, k2.job_id FROM pgsched.idempotency_keys k2
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
