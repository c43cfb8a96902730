-- add_occurrences
-- contract: files a scanner's expansion of one schedule over a window, fenced
-- by the scanner's lease on the schedule's shard (PS409 when lost). Each
-- element of `occurrences` is {fire_at, nominal, dst, decision, reason}:
-- decisions 'fire' and 'misfire_fired' become ordinary jobs due at fire_at
-- whose idempotency key is (schedule, fire time in UTC), so two scanners, a
-- restart or a re-expansion never create one occurrence twice; every element
-- is recorded in schedule_occurrences with its decision (first decision
-- wins). When the schedule's version is not p_version any more (edited
-- meanwhile) nothing is filed. A version change since the last expansion
-- first withdraws the not-yet-started occurrences from p_from on. Returns the
-- number of jobs created.
CREATE OR REPLACE FUNCTION pgsched.add_occurrences(
    scanner     text,
    shard       integer,
    epoch       bigint,
    schedule    text,
    version     integer,
    occurrences jsonb,
    p_from      timestamptz,
    p_until     timestamptz,
    p_now       timestamptz DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_sched pgsched.schedules;
    v_occ jsonb;
    v_fire timestamptz;
    v_job_id bigint;
    v_created integer := 0;
    v_key text;
BEGIN
    PERFORM pgsched._hold_shard(add_occurrences.scanner, add_occurrences.shard, add_occurrences.epoch, v_now);
    SELECT * INTO v_sched FROM pgsched.schedules s
    WHERE s.name = add_occurrences.schedule AND s.version = add_occurrences.version
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF v_sched.expanded_version <> v_sched.version THEN
        PERFORM pgsched._withdraw(v_sched.name, add_occurrences.p_from, v_now,
                                  pg_catalog.format('schedule changed (version %s)', v_sched.version));
    END IF;

    FOR v_occ IN SELECT e FROM pg_catalog.jsonb_array_elements(coalesce(add_occurrences.occurrences, '[]')) e LOOP
        v_fire := (v_occ->>'fire_at')::timestamptz;
        v_job_id := NULL;
        IF v_occ->>'decision' IN ('fire', 'misfire_fired') AND v_sched.enabled THEN
            v_key := 'pgsched:schedule:' || v_sched.name || ':'
                     || pg_catalog.to_char(v_fire AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"');
            INSERT INTO pgsched.jobs AS j
                (shard, queue, task, args, priority, run_at, idempotency_key, max_attempts, labels, tenant, schedule)
            VALUES (v_sched.shard, v_sched.queue, v_sched.task, v_sched.args, v_sched.priority, v_fire, v_key,
                    v_sched.max_attempts, v_sched.labels, v_sched.tenant, v_sched.name)
            RETURNING j.id INTO v_job_id;
            IF v_job_id IS NOT NULL THEN
                v_created := v_created + 1;
            ELSE
                SELECT k.job_id INTO v_job_id FROM pgsched.idempotency_keys k
                WHERE k.key = v_key AND k.tenant IS NOT DISTINCT FROM v_sched.tenant;
            END IF;
        END IF;
        INSERT INTO pgsched.schedule_occurrences AS o
            (schedule, fire_at, nominal, dst, decision, reason, job_id, version, decided_at)
        VALUES (v_sched.name, v_fire, v_occ->>'nominal', v_occ->>'dst', v_occ->>'decision', v_occ->>'reason',
                v_job_id, v_sched.version, v_now)
        ON CONFLICT ON CONSTRAINT schedule_occurrences_pkey DO UPDATE
        SET decision = EXCLUDED.decision, reason = EXCLUDED.reason, job_id = EXCLUDED.job_id,
            version = EXCLUDED.version, decided_at = EXCLUDED.decided_at, nominal = EXCLUDED.nominal,
            dst = EXCLUDED.dst
        WHERE o.decision = 'withdrawn';
    END LOOP;

    UPDATE pgsched.schedules s
    SET expanded_until = greatest(coalesce(s.expanded_until, add_occurrences.p_until), add_occurrences.p_until),
        expanded_version = s.version, last_error = NULL
    WHERE s.name = v_sched.name;
    RETURN v_created;
END
$$;
