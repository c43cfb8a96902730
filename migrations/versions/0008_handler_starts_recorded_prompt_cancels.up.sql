-- 0008: handler starts recorded, prompt cancels

-- worker-cancel: handler starts recorded apart from claims (pgsched.start()),
-- cancel requests delivered by NOTIFY, and the poll for workers without LISTEN.
-- Applied after the copied files (claim.sql, cancel.sql, complete.sql,
-- start.sql, cancels_requested.sql, tg_jobs__before_insert.sql, 40_views.sql).

-- The claim's time; started_at now means the handler's start (NULL while a
-- claimed job waits for a slot). Column last, as in sql/10_tables.sql.
-- (Must exist before claim.sql/complete.sql/40_views.sql are replaced: put it
-- first in the revision.)
ALTER TABLE pgsched.jobs ADD COLUMN claimed_at timestamptz;
COMMENT ON COLUMN pgsched.jobs.started_at IS
    'When the handler of the current attempt started (pgsched.start()); NULL while claimed and waiting for a slot.';
-- Jobs running at upgrade time were started by workers that stamped the claim.
UPDATE pgsched.jobs SET claimed_at = started_at WHERE state = 'running' AND claimed_at IS NULL;

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
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
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


-- functions/cancel.sql
-- cancel
-- contract: a waiting job (scheduled or available) is cancelled at once and
-- returns 'cancelled'; once that is returned the job can never start. A
-- running job gets a cancel request ('cancel_requested'), and its worker is
-- told at once: a NOTIFY on pgsched_cancel whose payload is the job id only
-- (the heartbeat, or a short poll without LISTEN, is the fallback). A claimed
-- job whose handler has not started yet never starts (start() refuses it);
-- a started one ends as 'cancelled' unless it had already succeeded. A
-- finished job is left as it is ('already_completed', 'already_dead',
-- 'already_cancelled'); an unknown id
-- returns 'not_found', as does a job of another tenant for a session
-- confined to one (see _check_tenant).
CREATE OR REPLACE FUNCTION pgsched.cancel(
    job_id bigint,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_job pgsched.jobs;
    v_state pgsched.job_state;
    v_tenant text;
BEGIN
    -- This function bypasses row-level security, so it confines tenants itself.
    SELECT t.tenant INTO v_tenant
    FROM (SELECT j.tenant FROM pgsched.jobs j WHERE j.id = cancel.job_id
          UNION ALL
          SELECT h.tenant FROM pgsched.job_history h WHERE h.id = cancel.job_id) t
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            PERFORM pgsched._check_tenant(v_tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN 'not_found';
        END;
    END IF;

    -- A job can move between waiting and running while we look (a claim, a
    -- retry); each statement is fenced on state, so try the pair again.
    FOR i IN 1 .. 3 LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = cancel.job_id AND j.state IN ('scheduled', 'available')
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._finish(v_job, 'cancelled', v_now, 'cancelled before it ran');
            RETURN 'cancelled';
        END IF;

        UPDATE pgsched.jobs j
        SET cancel_requested_at = coalesce(j.cancel_requested_at, v_now)
        WHERE j.id = cancel.job_id AND j.state = 'running'
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._event(v_job.id, v_now, 'cancel_requested', v_job.attempt, v_job.leased_by,
                                   v_job.lease_token);
            PERFORM pg_catalog.pg_notify('pgsched_cancel', v_job.id::text);
            RETURN 'cancel_requested';
        END IF;

        SELECT h.state INTO v_state
        FROM pgsched.job_history h
        WHERE h.id = cancel.job_id
        ORDER BY h.finished_at DESC
        LIMIT 1;
        IF FOUND AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = cancel.job_id) THEN
            RETURN 'already_' || v_state::text;
        END IF;
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = cancel.job_id) THEN
            RETURN 'not_found';
        END IF;
    END LOOP;
    RETURN 'busy';
END
$$;


-- functions/cancels_requested.sql
-- cancels_requested
-- contract: of these (job_id, token) pairs, the jobs whose lease is current
-- and whose cancellation was requested. Reads only: workers without LISTEN
-- (behind a transaction-pooling PgBouncer, or --no-listen) call it every
-- fraction of a second, between heartbeats, so a running handler learns of a
-- cancel promptly without extending every lease that often.
CREATE OR REPLACE FUNCTION pgsched.cancels_requested(
    job_ids bigint[],
    tokens  bigint[]
)
RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT j.id
    FROM pgsched.jobs j
    JOIN unnest(cancels_requested.job_ids, cancels_requested.tokens) AS u(id, token)
      ON j.id = u.id AND j.lease_token = u.token
    WHERE j.state = 'running' AND j.cancel_requested_at IS NOT NULL
$$;


-- functions/claim.sql
-- claim
-- contract: leases up to n due jobs of `queues` (skipping paused queues, and
-- jobs whose labels the worker does not all offer) to `worker` for `lease`.
-- Each claimed job gets a new fencing token, larger than any before, and its
-- attempt incremented. A job is never leased twice at once: rows are locked
-- with SKIP LOCKED and re-checked as 'available' by the same UPDATE.
--
-- Shards are visited one statement each, starting at start_shard (workers
-- rotate it), so concurrent claimers spread over partitions instead of
-- fighting for the same rows; within a shard, each queue is one index scan
-- in (priority DESC, run_at, id) order that stops after n rows, whatever the
-- backlog. Queues take turns by the same rotation. Priority orders jobs
-- within a shard and queue; across shards it holds within one rotation.
--
-- With start_shard NULL, each queue is instead one statement over all shards
-- at once (a merge of every shard's index, strict priority across shards):
-- the cheaper pass when little is queued, which workers use when idle.
CREATE OR REPLACE FUNCTION pgsched.claim(
    worker      text,
    queues      text[],
    n           integer,
    lease       interval,
    labels      text[]      DEFAULT '{}',
    start_shard integer     DEFAULT NULL,
    p_now       timestamptz DEFAULT NULL
)
RETURNS TABLE (
    id bigint, shard smallint, queue text, task text, args jsonb, attempt integer,
    max_attempts integer, lease_token bigint, idempotency_key text, run_at timestamptz,
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan for every shard (pruned to the shard when it runs) instead of
-- planning the partitioned statement again at each call.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    -- The clock now, not at transaction start: the lease runs from the claim.
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_shards integer;
    v_audit boolean;
    v_queues text[];
    v_left integer := claim.n;
    v_got integer;
    v_shard smallint;
    v_queue text;
    v_nq integer;
    -- A session confined to a tenant claims only that tenant's jobs.
    v_scope text := pgsched._tenant_scope();
BEGIN
    IF claim.n IS NULL OR claim.n < 1 OR claim.lease IS NULL OR claim.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: claim needs n >= 1 and a positive lease' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.shards, c.audit INTO v_shards, v_audit FROM pgsched.config c;
    SELECT pg_catalog.array_agg(q) INTO v_queues
    FROM unnest(claim.queues) q
    WHERE NOT EXISTS (SELECT 1 FROM pgsched.queues pq WHERE pq.name = q AND pq.paused);
    IF v_queues IS NULL THEN
        RETURN;
    END IF;

    v_nq := pg_catalog.cardinality(v_queues);

    IF claim.start_shard IS NULL THEN
        FOR i IN 1 .. v_nq LOOP
            v_queue := v_queues[i];
            RETURN QUERY
            WITH due AS MATERIALIZED (
                SELECT j.id, j.shard
                FROM pgsched.jobs j
                WHERE j.state = 'available'
                  AND j.queue = v_queue
                  AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
                  AND (v_scope IS NULL OR j.tenant = v_scope)
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT v_left
                FOR UPDATE SKIP LOCKED
            ), leased AS (
                UPDATE pgsched.jobs j
                SET state = 'running',
                    attempt = j.attempt + 1,
                    lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                    leased_by = claim.worker,
                    lease_expires_at = v_now + claim.lease,
                    claimed_at = v_now,
                    started_at = NULL  -- set by start(), when a handler slot takes it
                WHERE j.id = ANY (ARRAY(SELECT due.id FROM due))
                  AND j.shard = ANY (ARRAY(SELECT due.shard FROM due))
                  AND j.state = 'available'
                RETURNING j.*
            ), audit AS (
                INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
                SELECT l.id, v_now, 'claimed', l.attempt, claim.worker, l.lease_token
                FROM leased l
                WHERE v_audit
            )
            SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
                   l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at
            FROM leased l;
            GET DIAGNOSTICS v_got = ROW_COUNT;
            v_left := v_left - v_got;
            EXIT WHEN v_left <= 0;
        END LOOP;
        RETURN;
    END IF;

    FOR i IN 0 .. v_shards * v_nq - 1 LOOP
        v_shard := ((coalesce(claim.start_shard, 0) + i / v_nq) % v_shards + v_shards) % v_shards;
        v_queue := v_queues[((coalesce(claim.start_shard, 0) + i) % v_nq + v_nq) % v_nq + 1];
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT j.id
            FROM pgsched.jobs j
            WHERE j.shard = v_shard
              AND j.state = 'available'
              AND j.queue = v_queue
              -- the first arm keeps the row estimate right (most jobs need no labels)
              AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
              AND (v_scope IS NULL OR j.tenant = v_scope)
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT v_left
            FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE pgsched.jobs j
            SET state = 'running',
                attempt = j.attempt + 1,
                lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                leased_by = claim.worker,
                lease_expires_at = v_now + claim.lease,
                claimed_at = v_now,
                started_at = NULL  -- set by start(), when a handler slot takes it
            -- ids as an array: one index probe each, never a scan of the partition
            WHERE j.shard = v_shard AND j.id = ANY (ARRAY(SELECT due.id FROM due)) AND j.state = 'available'
            RETURNING j.*
        ), audit AS (
            INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
            SELECT l.id, v_now, 'claimed', l.attempt, claim.worker, l.lease_token
            FROM leased l
            WHERE v_audit
        )
        SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at
        FROM leased l;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        EXIT WHEN v_left <= 0;
    END LOOP;
END
$$;


-- functions/complete.sql
-- complete
-- contract: finishes the jobs whose fencing token is still current, in one
-- statement: each accepted job leaves pgsched.jobs and enters
-- pgsched.job_history as 'completed' with its result, with one audit event.
-- A stale token (the lease expired and the job was handed to someone else, or
-- it already finished) changes nothing. Returns one row per input job saying
-- whether it was accepted. Each accepted job sends its status event on
-- pgsched_events when pgsched.config.events is on (docs/events.md). shards, when given, lets each lookup go straight
-- to the job's partition.
CREATE OR REPLACE FUNCTION pgsched.complete(
    job_ids bigint[],
    tokens  bigint[],
    results jsonb[]     DEFAULT NULL,
    shards  smallint[]  DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, accepted boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_config pgsched.config;
    v_scope text := pgsched._tenant_scope();
BEGIN
    SELECT * INTO v_config FROM pgsched.config;
    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token, u.result, u.shard
        FROM unnest(complete.job_ids, complete.tokens, complete.results, complete.shards)
             AS u(id, token, result, shard)
        WHERE u.id IS NOT NULL
    ), done AS (
        -- Checks the token and the state in the statement that writes. The
        -- state filter lets the planner read only running rows (a partial
        -- index), however large the backlog.
        DELETE FROM pgsched.jobs j
        USING input u
        WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
          AND (u.shard IS NULL OR j.shard = u.shard)
          AND (v_scope IS NULL OR j.tenant = v_scope)  -- tokens are guessable, tenants are not
        RETURNING j.*, u.result
    ), history AS (
        INSERT INTO pgsched.job_history
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
             leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule)
        SELECT d.id, d.shard, 'completed', d.queue, d.task, d.args, d.priority, d.run_at, d.attempt,
               d.max_attempts, d.lease_token, d.leased_by, d.idempotency_key, d.labels, d.tenant,
               -- a worker that never called start() ran it from its claim on
               d.created_at, coalesce(d.started_at, d.claimed_at), v_now, d.result, NULL, d.schedule
        FROM done d
    ), audit AS (
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
        SELECT d.id, v_now, 'completed', d.attempt, d.leased_by, d.lease_token
        FROM done d
        WHERE v_config.audit
    ), keys AS (
        UPDATE pgsched.idempotency_keys k
        SET expires_at = v_now + v_config.idempotency_retention
        FROM done d
        WHERE d.idempotency_key IS NOT NULL AND k.key = d.idempotency_key AND k.job_id = d.id
    ), notified AS (
        -- Same payload as _finish's. Volatile, so materialized: the count
        -- below reads every row, and so sends every NOTIFY.
        SELECT pg_catalog.pg_notify('pgsched_events', pg_catalog.json_build_object(
            'id', d.id, 'queue', d.queue, 'task', d.task, 'state', 'completed', 'attempt', d.attempt)::text)
        FROM done d
        WHERE v_config.events
    )
    SELECT u.id, d.id IS NOT NULL
    FROM input u
    LEFT JOIN done d ON d.id = u.id
    CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) n;
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
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
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


-- functions/start.sql
-- start
-- contract: records that the handlers of these claimed jobs start now, in
-- one statement for a batch of starts, fenced by each job's token: only a
-- job whose lease is current and whose cancellation was not requested gets
-- its started_at (the database's clock, read when the statement runs). Returns
-- one row per input job: 'started' (run the handler), 'cancel_requested'
-- (do not start it: cancel it, e.g. fail() records it 'cancelled') or
-- 'lease_lost' (another run may own it: do not start it). A job claimed but
-- not started has started_at NULL, so views tell "waiting for a slot" from
-- "running", and start lag (started_at - run_at) counts the wait for a slot.
--
-- Cancel-requested rows are rewritten unchanged rather than filtered out:
-- when a cancel() commits while this statement waits for the row, the
-- re-checked row version decides, so a cancel never loses to a start that
-- began a moment before it.
CREATE OR REPLACE FUNCTION pgsched.start(
    job_ids bigint[],
    tokens  bigint[],
    shards  smallint[]  DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token, u.shard
        FROM unnest(start.job_ids, start.tokens, start.shards) AS u(id, token, shard)
        WHERE u.id IS NOT NULL
    ), stamped AS (
        UPDATE pgsched.jobs j
        SET started_at = CASE WHEN j.cancel_requested_at IS NULL THEN v_now ELSE j.started_at END
        FROM input u
        WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
          AND (u.shard IS NULL OR j.shard = u.shard)
        RETURNING j.id, j.cancel_requested_at IS NULL AS go
    )
    SELECT u.id, CASE WHEN s.go THEN 'started' WHEN NOT s.go THEN 'cancel_requested' ELSE 'lease_lost' END
    FROM input u
    LEFT JOIN stamped s ON s.id = u.id;
END
$$;


-- functions/tg_jobs__before_insert.sql
-- tg_jobs__before_insert
-- contract: every row entering pgsched.jobs, by enqueue() or a plain INSERT,
-- gets its defaults, its validation and its wake-up here, so all paths behave
-- alike. A repeated idempotency key skips the row (INSERT 0 0) and keeps the
-- existing job; enqueue() then returns that job's id. A repeated key with
-- another task or other args raises PS422 (see _key_holder); a refused value
-- raises naming its column and value (see _check_job), not a partition.
--
-- Two triggers call it (30_triggers.sql). For a writer other than the
-- schema's owner (TG_ARGV[0] = 'untrusted': a plain INSERT by an
-- application) the database also assigns the id and stamps created_at,
-- whatever the INSERT said, and a schedule link is refused: only the owner's
-- functions (retry, the scanners' add_occurrences) set those. The shard, the
-- partition key, cannot change in a row trigger; pgsched_enqueue may name
-- only the columns a user chooses (90_grants.sql), so it comes from the
-- column default.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__before_insert()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_limit integer;
    v_default_attempts integer;
BEGIN
    SELECT c.max_payload_bytes, c.default_max_attempts INTO v_limit, v_default_attempts FROM pgsched.config c;

    IF TG_ARGV[0] = 'untrusted' THEN
        IF NEW.schedule IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: schedule is set by the scanners, not by an INSERT'
                USING ERRCODE = 'insufficient_privilege', SCHEMA = 'pgsched', TABLE = 'jobs', COLUMN = 'schedule';
        END IF;
        -- A copied id would give two active rows one identity (on two shards).
        NEW.id := pg_catalog.nextval('pgsched.jobs_id_seq');
        NEW.created_at := v_now;
        -- Before the key is looked at, so another tenant's keys reveal nothing
        -- (row-level security checks the row itself after this trigger).
        IF NEW.idempotency_key IS NOT NULL THEN
            PERFORM pgsched._check_tenant(NEW.tenant);
        END IF;
    END IF;

    -- A new job starts from nothing, whatever the INSERT said.
    NEW.attempt := 0;
    NEW.lease_token := NULL;
    NEW.leased_by := NULL;
    NEW.lease_expires_at := NULL;
    NEW.started_at := NULL;
    NEW.claimed_at := NULL;
    NEW.cancel_requested_at := NULL;
    NEW.last_error := NULL;
    -- Occurrences of schedules always pass through promotion, which applies
    -- the schedule's overlap policy.
    NEW.state := CASE WHEN NEW.run_at <= v_now AND NEW.schedule IS NULL THEN 'available' ELSE 'scheduled' END;

    PERFORM pgsched._check_job(NEW.task, NEW.queue, NEW.args, NEW.priority, NEW.run_at, NEW.max_attempts,
                               NEW.idempotency_key, NEW.labels, NEW.tenant);
    PERFORM pgsched._check_payload(NEW.args, v_limit);

    IF NEW.max_attempts IS NULL THEN
        SELECT t.max_attempts INTO NEW.max_attempts FROM pgsched.tasks t WHERE t.name = NEW.task;
        NEW.max_attempts := coalesce(NEW.max_attempts, v_default_attempts);
    END IF;

    IF NEW.idempotency_key IS NOT NULL THEN
        -- The key row is the lock: a concurrent insert of the same key waits
        -- here for the first one's commit, then sees the conflict. A redrive
        -- of the same job (retry()) re-activates its own key; a key whose
        -- retention ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        VALUES (NEW.idempotency_key, NEW.tenant, NEW.id, NEW.shard, v_now)
        ON CONFLICT (key, tenant) DO UPDATE
            SET job_id = NEW.id, shard = NEW.shard, created_at = v_now, expires_at = NULL
            WHERE k.job_id = NEW.id OR k.expires_at < v_now;
        IF NOT FOUND THEN
            IF NEW.schedule IS NULL THEN
                PERFORM pgsched._key_holder(NEW.idempotency_key, NEW.task, NEW.args, NULL, NEW.tenant);
            END IF;
            RETURN NULL;
        END IF;
    END IF;

    IF NEW.state = 'available' THEN
        -- Delivered at commit; identical notifications in one transaction
        -- are folded into one by PostgreSQL, so a batch sends one per queue.
        PERFORM pg_catalog.pg_notify('pgsched_jobs', NEW.queue);
    ELSE
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN NEW;
END
$$;


-- 40_views.sql
-- pgsched: views, the operator's surface. Per queue, never only averages.

-- queue_stats: depth by state, the age of the oldest due job, retries, and
-- over the last five minutes the finished counts, throughput and start lag
-- (handler start - due) percentiles. running counts jobs whose handler has
-- started; claimed, those leased to a worker and waiting for a free slot.
CREATE OR REPLACE VIEW pgsched.queue_stats AS
WITH active AS (
    SELECT j.queue,
           pg_catalog.count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
           pg_catalog.count(*) FILTER (WHERE j.state = 'available') AS available,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.started_at IS NOT NULL) AS running,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.started_at IS NULL) AS claimed,
           pg_catalog.count(*) FILTER (WHERE j.state IN ('scheduled', 'available') AND j.attempt > 0) AS retrying,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.lease_expires_at < pg_catalog.now())
               AS lease_expired,
           pg_catalog.min(j.run_at) FILTER (
               WHERE j.state = 'available' OR (j.state = 'scheduled' AND j.run_at <= pg_catalog.now()))
               AS oldest_due_at
    FROM pgsched.jobs j
    GROUP BY j.queue
), recent AS (
    SELECT h.queue,
           pg_catalog.count(*) FILTER (WHERE h.state = 'completed') AS completed_5m,
           pg_catalog.count(*) FILTER (WHERE h.state = 'dead') AS dead_5m,
           pg_catalog.count(*) FILTER (WHERE h.state = 'cancelled') AS cancelled_5m,
           pg_catalog.percentile_cont(0.5) WITHIN GROUP (
               ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p50,
           pg_catalog.percentile_cont(0.95) WITHIN GROUP (
               ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p95,
           pg_catalog.percentile_cont(0.99) WITHIN GROUP (
               ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p99
    FROM pgsched.job_history h
    WHERE h.finished_at > pg_catalog.now() - interval '5 minutes'
    GROUP BY h.queue
), names AS (
    SELECT a.queue FROM active a
    UNION SELECT r.queue FROM recent r
    UNION SELECT q.name FROM pgsched.queues q
)
SELECT n.queue,
       coalesce(q.paused, false) AS paused,
       coalesce(a.scheduled, 0) AS scheduled,
       coalesce(a.available, 0) AS available,
       coalesce(a.running, 0) AS running,
       coalesce(a.retrying, 0) AS retrying,
       coalesce(a.lease_expired, 0) AS lease_expired,
       coalesce(EXTRACT(EPOCH FROM pg_catalog.now() - a.oldest_due_at), 0)::double precision AS oldest_due_age_s,
       coalesce(r.completed_5m, 0) AS completed_5m,
       coalesce(r.dead_5m, 0) AS dead_5m,
       coalesce(r.cancelled_5m, 0) AS cancelled_5m,
       round((coalesce(r.completed_5m, 0) / 300.0)::numeric, 2)::double precision AS completed_per_s,
       r.lag_p50::double precision AS lag_p50_s,
       r.lag_p95::double precision AS lag_p95_s,
       r.lag_p99::double precision AS lag_p99_s,
       coalesce(a.claimed, 0) AS claimed
FROM names n
LEFT JOIN active a ON a.queue = n.queue
LEFT JOIN recent r ON r.queue = n.queue
LEFT JOIN pgsched.queues q ON q.name = n.queue;
COMMENT ON VIEW pgsched.queue_stats IS
    'Per queue: depth by state (running: handler started; claimed: leased, waiting for a slot), oldest due job age, retries waiting, expired leases, and the last 5 minutes of finished work with start-lag percentiles (seconds).';

-- dead_letters: jobs whose latest outcome is dead and that were not redriven.
CREATE OR REPLACE VIEW pgsched.dead_letters AS
SELECT h.id, h.queue, h.task, h.args, h.attempt, h.max_attempts, h.error, h.finished_at AS died_at,
       h.created_at, h.idempotency_key, h.tenant, h.labels, h.leased_by AS last_worker
FROM pgsched.job_history h
WHERE h.state = 'dead'
  AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
  AND NOT EXISTS (SELECT 1 FROM pgsched.job_history h2 WHERE h2.id = h.id AND h2.finished_at > h.finished_at);
COMMENT ON VIEW pgsched.dead_letters IS
    'Dead jobs awaiting a decision: SELECT pgsched.retry(id) redrives one.';

-- workers_live: workers seen in the last minute, with what they hold now:
-- jobs whose handler runs, and jobs claimed that wait for a slot.
CREATE OR REPLACE VIEW pgsched.workers_live AS
SELECT w.name, w.host, w.pid, w.queues, w.labels, w.concurrency, w.started_at, w.last_seen,
       EXTRACT(EPOCH FROM pg_catalog.now() - w.last_seen)::double precision AS seen_s_ago,
       (SELECT pg_catalog.count(*) FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.leased_by = w.name AND j.started_at IS NOT NULL) AS running, w.version,
       (SELECT pg_catalog.count(*) FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.leased_by = w.name AND j.started_at IS NULL) AS claimed
FROM pgsched.workers w
WHERE w.last_seen > pg_catalog.now() - interval '1 minute';
COMMENT ON VIEW pgsched.workers_live IS 'Workers that reported within the last minute.';

-- schedule_status: each schedule with its next occurrence, its last finished
-- run, and why it cannot fire when it cannot.
CREATE OR REPLACE VIEW pgsched.schedule_status AS
SELECT s.name, s.cron, s.timezone, s.task, s.queue, s.enabled, s.concurrency, s.misfire_policy,
       s.gap_policy, s.overlap_policy, s.expanded_until, s.version, s.last_error,
       (SELECT pg_catalog.min(j.run_at) FROM pgsched.jobs j
        WHERE j.schedule = s.name AND j.state = 'scheduled') AS next_fire_at,
       (SELECT pg_catalog.count(*) FROM pgsched.jobs j
        WHERE j.schedule = s.name AND j.state IN ('available', 'running')) AS in_flight,
       last.finished_at AS last_finished_at, last.state AS last_state
FROM pgsched.schedules s
LEFT JOIN LATERAL (
    SELECT h.finished_at, h.state FROM pgsched.job_history h
    WHERE h.schedule = s.name ORDER BY h.finished_at DESC LIMIT 1
) last ON true;
COMMENT ON VIEW pgsched.schedule_status IS
    'Schedules with their next occurrence, runs in flight, the last outcome and any expansion error.';

-- queue_history: the per-minute rollup (see rollup_queue_history), with the
-- rates and failure totals charts draw. Counts are of the minute; depth and
-- the oldest due age were sampled during it (NULL when nobody sampled);
-- percentiles are of the jobs that finished in it. `final` says the minute
-- was rolled up after it ended (its counts will not change).
CREATE OR REPLACE VIEW pgsched.queue_history AS
SELECT m.minute, m.queue, m.completed, m.failed, m.dead, m.cancelled, m.retried, m.expired,
       m.failed + m.dead + m.expired AS failures,
       round((m.completed / 60.0)::numeric, 3)::double precision AS completed_per_s,
       m.available, m.scheduled, m.running, m.oldest_due_age_s,
       m.lag_p50_s, m.lag_p95_s, m.lag_p99_s, m.run_p50_s, m.run_p95_s, m.run_p99_s,
       m.rolled_at, m.rolled_at >= m.minute + interval '70 seconds' AS final
FROM pgsched.queue_minutes m;
COMMENT ON VIEW pgsched.queue_history IS
    'Per minute and queue: completed, failed (retried runs), dead, cancelled, redriven, expired leases, sampled depth, start-lag and run-time percentiles (seconds).';

-- New functions: the worker role only.
REVOKE EXECUTE ON FUNCTION pgsched.start(bigint[], bigint[], smallint[], timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched.cancels_requested(bigint[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.start, pgsched.cancels_requested TO pgsched_worker;

-- 40_views.sql now uses CREATE OR REPLACE VIEW (so it can be copied whole), which
-- resets a view's options: set them again, as sql/90_grants.sql does.
ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);
ALTER VIEW pgsched.queue_history SET (security_invoker = true);
