-- 0005 down: schedules expanded by lone workers, catch-up policies, validated schedules

-- (the grants go with the functions dropped below)

-- functions/_valid_timezone.sql as of the previous revision
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


DROP FUNCTION IF EXISTS pgsched._cron_value(text, integer);
DROP FUNCTION IF EXISTS pgsched._cron_field(text, integer);
DROP FUNCTION IF EXISTS pgsched._check_schedule(text, integer, integer, text[], text, jsonb);
DROP FUNCTION IF EXISTS pgsched.acquire_idle_shards(text, interval, timestamptz);
-- functions/promote_due.sql as of the previous revision
-- promote_due
-- contract: makes scheduled jobs whose run_at has come 'available' and wakes
-- workers of their queues (one NOTIFY per queue). Reads only due rows of the
-- scheduled index, so a backlog of far-future jobs costs nothing. Returns the
-- number promoted (at most p_limit; call again while it is p_limit).
--
-- Occurrences of recurring schedules pass through the schedule's concurrency
-- policy when the previous run of the same schedule is still queued or
-- running: 'allow' promotes anyway, 'skip' cancels this occurrence, 'queue'
-- keeps one occurrence waiting (re-checked every second) and skips the rest,
-- 'replace' cancels the previous run and promotes this one. An occurrence
-- later than the schedule's misfire_grace (nothing ran to promote it in
-- time) first meets the misfire policy: 'skip' drops it, 'latest' drops it
-- when a later occurrence is also due, 'all' drops it only beyond
-- misfire_cap due occurrences. Each decision is recorded in
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
        SELECT s.concurrency, s.misfire_policy, s.misfire_cap, s.misfire_grace INTO v_sched
        FROM pgsched.schedules s WHERE s.name = v_occ.schedule;
        v_policy := coalesce(v_sched.concurrency, 'allow');

        v_skip := NULL;
        IF v_sched.misfire_grace IS NOT NULL AND v_occ.run_at < v_now - v_sched.misfire_grace THEN
            SELECT pg_catalog.count(*) INTO v_later FROM pgsched.jobs w
            WHERE w.schedule = v_occ.schedule AND w.state = 'scheduled' AND w.run_at <= v_now
              AND (w.run_at, w.id) > (v_occ.run_at, v_occ.id);
            IF v_sched.misfire_policy = 'skip'
               OR (v_sched.misfire_policy = 'latest' AND v_later > 0)
               OR (v_sched.misfire_policy = 'all' AND v_later >= v_sched.misfire_cap) THEN
                v_skip := pg_catalog.format('misfire policy %s: due at %s, missed by more than %s',
                                            v_sched.misfire_policy, v_occ.run_at, v_sched.misfire_grace);
            END IF;
        END IF;
        IF v_skip IS NOT NULL THEN
            DELETE FROM pgsched.jobs j
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
            RETURNING j.* INTO v_job;
            IF FOUND THEN
                PERFORM pgsched._finish(v_job, 'cancelled', v_now, 'skipped: ' || v_skip);
                UPDATE pgsched.schedule_occurrences o
                SET decision = 'skipped_misfire', decided_at = v_now, reason = v_skip
                WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
            END IF;
            CONTINUE;
        END IF;

        v_busy := v_policy <> 'allow' AND EXISTS (
            SELECT 1 FROM pgsched.jobs o
            WHERE o.schedule = v_occ.schedule AND o.id <> v_occ.id AND o.state IN ('available', 'running'));

        IF NOT v_busy THEN
            UPDATE pgsched.jobs j SET state = 'available'
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled';
            v_queues := pg_catalog.array_append(v_queues, v_occ.queue);
            v_count := v_count + 1;
        ELSIF v_policy = 'skip'
           OR (v_policy = 'queue' AND EXISTS (
                SELECT 1 FROM pgsched.jobs w
                WHERE w.schedule = v_occ.schedule AND w.state = 'scheduled' AND w.id < v_occ.id
                  AND w.run_at <= v_now + interval '1 second')) THEN
            DELETE FROM pgsched.jobs j
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
            RETURNING j.* INTO v_job;
            IF FOUND THEN
                PERFORM pgsched._finish(v_job, 'cancelled', v_now,
                    CASE v_policy WHEN 'skip' THEN 'skipped: the previous run of this schedule was still going'
                                  ELSE 'skipped: one occurrence of this schedule is already queued' END);
                UPDATE pgsched.schedule_occurrences o
                SET decision = 'skipped_overlap', decided_at = v_now,
                    reason = pg_catalog.format('concurrency policy %s: previous run still going', v_policy)
                WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
            END IF;
        ELSIF v_policy = 'queue' THEN
            -- Wait for the previous run; look again in a second (no busy loop).
            UPDATE pgsched.jobs j SET run_at = v_now + interval '1 second'
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled';
            UPDATE pgsched.schedule_occurrences o
            SET decision = 'queued', decided_at = v_now,
                reason = 'concurrency policy queue: waiting for the previous run'
            WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id AND o.decision <> 'queued';
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


-- functions/scan_shard.sql as of the previous revision
-- scan_shard
-- contract: one scanner pass over one shard it holds (fenced by owner and
-- epoch, see _hold_shard): expires dead workers' leases, promotes due jobs
-- (waking workers), and says when the shard's next scheduled job is due so the
-- scanner can sleep until exactly then. Raises PS409 when the lease is gone.
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
BEGIN
    PERFORM pgsched._hold_shard(scan_shard.scanner, scan_shard.shard, scan_shard.epoch, v_now);
    v_expired := pgsched.expire_leases(v_now, 1000, scan_shard.shard);
    v_promoted := pgsched.promote_due(v_now, 10000, scan_shard.shard);
    RETURN QUERY SELECT v_expired, v_promoted, pgsched.next_due(scan_shard.shard), pg_catalog.clock_timestamp();
END
$$;


-- functions/tg_schedules__before_write.sql as of the previous revision
-- tg_schedules__before_write
-- contract: a schedule lives on the shard of its name; any change to what a
-- schedule fires (cron, zone, task, args, queue, policies, enabled...) bumps
-- its version, so the next scan withdraws the occurrences expanded under the
-- old version and expands the new one. Works for plain INSERT/UPDATE too.
CREATE OR REPLACE FUNCTION pgsched.tg_schedules__before_write()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
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


-- functions/upsert_schedule.sql as of the previous revision
-- upsert_schedule
-- contract: creates the schedule `name`, or updates it when it exists (an
-- update that changes what it fires takes effect at the next scan: future
-- occurrences expanded under the old definition are withdrawn and replaced).
-- Returns the schedule's version afterwards.
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


