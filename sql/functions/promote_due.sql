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
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
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
                    UPDATE pgsched.jobs j SET cancel_requested_at = coalesce(j.cancel_requested_at, v_now)
                    WHERE j.id = v_prev.id AND j.shard = v_prev.shard AND j.state = 'running'
                    RETURNING j.* INTO v_job;
                    IF FOUND THEN
                        PERFORM pgsched._event(v_job.id, v_now, 'cancel_requested', v_job.attempt,
                                               v_job.leased_by, v_job.lease_token);
                    END IF;
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
