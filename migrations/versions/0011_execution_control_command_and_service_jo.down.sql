-- 0011 down: execution control, command and service jobs, dependencies, tracing

-- Jobs that wait for dependencies have no state before this revision: refuse.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgsched.jobs WHERE state::text = 'waiting') THEN
        RAISE EXCEPTION 'pgsched: cannot downgrade below 0011 while jobs wait for dependencies (state waiting): cancel or finish them first';
    END IF;
END
$$;

-- The views as they were (queue_stats without waiting), then the tables.
DROP VIEW IF EXISTS pgsched.queue_history, pgsched.schedule_status, pgsched.workers_live,
    pgsched.dead_letters, pgsched.queue_stats;
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

ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);
ALTER VIEW pgsched.queue_history SET (security_invoker = true);
GRANT SELECT ON pgsched.queue_stats, pgsched.dead_letters TO pgsched_enqueue;
GRANT SELECT ON pgsched.queue_stats, pgsched.dead_letters, pgsched.workers_live, pgsched.schedule_status,
    pgsched.queue_history TO pgsched_worker;

DROP TABLE IF EXISTS pgsched.job_dependencies;
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_state_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_state_valid CHECK (CASE state
        WHEN 'running' THEN lease_token IS NOT NULL AND leased_by IS NOT NULL AND lease_expires_at IS NOT NULL
        WHEN 'available' THEN lease_token IS NULL
        WHEN 'scheduled' THEN lease_token IS NULL
        ELSE false END);
COMMENT ON TABLE pgsched.jobs IS
    'Active jobs (scheduled, available, running), one partition per shard. Plain INSERT with task and args works; everything else goes through functions.';
ALTER TABLE pgsched.jobs DROP COLUMN timeout, DROP COLUMN deadline_at, DROP COLUMN handbacks, DROP COLUMN service,
    DROP COLUMN trace_context;
ALTER TABLE pgsched.job_history DROP COLUMN service;
ALTER TABLE pgsched.tasks DROP COLUMN timeout;
ALTER TABLE pgsched.config DROP COLUMN timeout_grace, DROP COLUMN max_handbacks;
-- (the role pgsched_command is cluster-wide and the enum value 'waiting' cannot be dropped: both stay)

DROP FUNCTION IF EXISTS pgsched._check_command_task(text, text);
DROP FUNCTION IF EXISTS pgsched._depend(bigint[], smallint[], jsonb[], text[], timestamptz, boolean);
DROP FUNCTION IF EXISTS pgsched._fail_overdue(timestamptz, integer, integer);
DROP FUNCTION IF EXISTS pgsched._fail_dependents(bigint, pgsched.job_state, timestamptz);
-- functions/_finish.sql as of the previous revision
-- _finish
-- contract: records a job that was just deleted from pgsched.jobs (by the
-- caller's own fenced DELETE, in the same transaction) as finished: a
-- history row in p_state, one audit event, the idempotency key's
-- retention clock started, and the status event on pgsched_events (when
-- pgsched.config.events is on; payload in docs/events.md, the same as
-- complete()'s). Callers do the check-and-write; this only files.
CREATE OR REPLACE FUNCTION pgsched._finish(
    p_job    pgsched.jobs,
    p_state  pgsched.job_state,
    p_now    timestamptz,
    p_error  text  DEFAULT NULL,
    p_result jsonb DEFAULT NULL,
    p_detail jsonb DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_config pgsched.config;
BEGIN
    SELECT * INTO v_config FROM pgsched.config;
    INSERT INTO pgsched.job_history
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
         leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule)
    VALUES (p_job.id, p_job.shard, p_state, p_job.queue, p_job.task, p_job.args, p_job.priority,
            p_job.run_at, p_job.attempt, p_job.max_attempts, p_job.lease_token, p_job.leased_by,
            p_job.idempotency_key, p_job.labels, p_job.tenant, p_job.created_at,
            -- a worker that never called start() (SQL only): the claim is the start;
            -- a job cancelled before its handler started has none
            coalesce(p_job.started_at,
                     CASE WHEN p_job.state = 'running' AND p_state <> 'cancelled' THEN p_job.claimed_at END),
            p_now, p_result, p_error, p_job.schedule);
    IF v_config.events THEN
        PERFORM pg_catalog.pg_notify('pgsched_events', pg_catalog.json_build_object(
            'id', p_job.id, 'queue', p_job.queue, 'task', p_job.task, 'state', p_state,
            'attempt', p_job.attempt)::text);
    END IF;
    IF v_config.audit THEN
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        VALUES (p_job.id, p_now, p_state::text, p_job.attempt, p_job.leased_by, p_job.lease_token,
                coalesce(p_detail, CASE WHEN p_error IS NULL THEN NULL ELSE pg_catalog.jsonb_build_object('error', p_error) END));
    END IF;
    IF p_job.idempotency_key IS NOT NULL THEN
        UPDATE pgsched.idempotency_keys k
        SET expires_at = p_now + v_config.idempotency_retention
        WHERE k.key = p_job.idempotency_key AND k.job_id = p_job.id;
    END IF;
END
$$;


-- functions/_put_back.sql as of the previous revision
-- _put_back
-- contract: returns a running job to the queue under its fencing token
-- without spending its failure budget: max_attempts grows by one, so the
-- attempt counter keeps growing (every run has a new attempt and token) while
-- the job keeps as many failures as it had. A job whose cancellation was
-- requested is cancelled instead. Returns the new state, or 'lease_lost'.
CREATE OR REPLACE FUNCTION pgsched._put_back(
    p_job_id bigint,
    p_token  bigint,
    p_run_at timestamptz,
    p_kind   text,
    p_now    timestamptz
)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_job pgsched.jobs;
    v_run_at timestamptz := coalesce(p_run_at, p_now);
    v_scope text := pgsched._tenant_scope();
BEGIN
    UPDATE pgsched.jobs j
    SET run_at = v_run_at,
        state = CASE WHEN v_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        -- saturates at the enqueue bound (jobs_max_attempts_range): never overflows
        max_attempts = j.max_attempts + (j.max_attempts < 1000000)::integer,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        PERFORM pgsched._event(p_job_id, p_now, p_kind, v_job.attempt, NULL, p_token,
            pg_catalog.jsonb_build_object('run_at', v_run_at));
        IF v_job.state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_job.state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NOT NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        PERFORM pgsched._finish(v_job, 'cancelled', p_now, 'cancelled while running');
        RETURN 'cancelled';
    END IF;
    RETURN 'lease_lost';
END
$$;


DROP FUNCTION IF EXISTS pgsched._release(bigint[], smallint[], timestamptz);
DROP FUNCTION IF EXISTS pgsched._release_dependents(bigint[], timestamptz);
-- functions/cancel.sql as of the previous revision
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


DROP FUNCTION IF EXISTS pgsched.claim(text, text[], integer, interval, text[], integer, timestamptz);
-- functions/claim.sql as of the previous revision
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


-- functions/complete.sql as of the previous revision
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


DROP FUNCTION IF EXISTS pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text, interval, bigint[], text, jsonb);
-- functions/enqueue.sql as of the previous revision
-- enqueue
-- contract: adds one job and returns its id. For an idempotency key already
-- held by an active job, or by a finished one within the retention window,
-- returns that job's id and adds nothing (keys are per tenant), provided the
-- task and args are the same (else PS422, see _key_holder). The shard derives from the key when
-- there is one (so a key always lands on the same shard), else it is random.
-- A refused value raises with its column named (see _check_job).
--
-- It does itself what the insert trigger does for a plain INSERT (defaults,
-- the payload limit, the key, the wake-up), then inserts as a trusted writer
-- the trigger skips: one statement's work instead of two.
CREATE OR REPLACE FUNCTION pgsched.enqueue(
    task            text,
    args            jsonb       DEFAULT '{}',
    queue           text        DEFAULT 'default',
    run_at          timestamptz DEFAULT NULL,
    priority        integer     DEFAULT 0,
    idempotency_key text        DEFAULT NULL,
    max_attempts    integer     DEFAULT NULL,
    labels          text[]      DEFAULT '{}',
    tenant          text        DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_run_at timestamptz := coalesce(enqueue.run_at, pg_catalog.now());
    v_shards integer;
    v_limit integer;
    v_default_attempts integer;
    v_id bigint := pg_catalog.nextval('pgsched.jobs_id_seq');
    v_shard smallint;
    v_queue text := coalesce(enqueue.queue, 'default');
    v_max integer := enqueue.max_attempts;
BEGIN
    PERFORM pgsched._check_tenant(enqueue.tenant);
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    PERFORM pgsched._check_job(enqueue.task, v_queue, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0),
                               v_run_at, v_max, enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant);
    PERFORM pgsched._check_payload(enqueue.args, v_limit);
    IF v_max IS NULL THEN
        SELECT t.max_attempts INTO v_max FROM pgsched.tasks t WHERE t.name = enqueue.task;
        v_max := coalesce(v_max, v_default_attempts);
    END IF;

    IF enqueue.idempotency_key IS NULL THEN
        v_shard := pg_catalog.floor(pg_catalog.random() * v_shards)::smallint;
    ELSE
        v_shard := ((pg_catalog.hashtextextended(enqueue.idempotency_key, 0) % v_shards + v_shards) % v_shards)::smallint;
        -- The key row is the lock: a concurrent enqueue of the same key waits
        -- here for the first one's commit, then sees the conflict. A key whose
        -- retention ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        VALUES (enqueue.idempotency_key, enqueue.tenant, v_id, v_shard, v_now)
        ON CONFLICT ON CONSTRAINT idempotency_keys_key_tenant DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now;
        IF NOT FOUND THEN
            -- A new statement: its snapshot sees the holder we waited for.
            RETURN pgsched._key_holder(enqueue.idempotency_key, enqueue.task, enqueue.args, NULL, enqueue.tenant);
        END IF;
    END IF;

    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);
    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant)
    VALUES (v_id, v_shard, CASE WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, enqueue.task, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0), v_run_at, 0, v_max,
            enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant);
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

    IF v_run_at <= v_now THEN
        PERFORM pg_catalog.pg_notify('pgsched_jobs', v_queue);
    ELSE
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN v_id;
END
$$;


DROP FUNCTION IF EXISTS pgsched.enqueue_command(text[], jsonb, text, interval, text, integer, timestamptz, integer, text, text[], text);
DROP FUNCTION IF EXISTS pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[], jsonb[], text[], jsonb);
-- functions/enqueue_many.sql as of the previous revision
-- enqueue_many
-- contract: enqueue() for many jobs in one statement, all or nothing; returns
-- one id per input row, in input order (for a repeated idempotency key, the
-- holder's id; rows repeating a key within the batch get the first row's
-- job; a repeated key with another task or other args raises PS422). Arrays
-- are parallel: each one given has exactly one element per task (else
-- invalid_parameter_value, naming the array); a NULL array, or a NULL
-- element, means the default. labels are JSON arrays of strings, one per job.
-- A refused row raises naming its position (1-based, the ord returned), its
-- column and its value; nothing of the batch is written.
CREATE OR REPLACE FUNCTION pgsched.enqueue_many(
    tasks            text[],
    args             jsonb[]       DEFAULT NULL,
    queues           text[]        DEFAULT NULL,
    run_ats          timestamptz[] DEFAULT NULL,
    priorities       integer[]     DEFAULT NULL,
    idempotency_keys text[]        DEFAULT NULL,
    max_attempts     integer[]     DEFAULT NULL,
    tenants          text[]        DEFAULT NULL,
    labels           jsonb[]       DEFAULT NULL
)
RETURNS TABLE (ord bigint, job_id bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_shards integer;
    v_limit integer;
    v_default_attempts integer;
    v_ords bigint[];
    v_ids bigint[];
    v_keys text[];
    v_tenants text[];
    v_queues text[];
    v_scheduled boolean;
    v_n integer := pg_catalog.cardinality(tasks);
    v_bad record;
BEGIN
    IF tasks IS NULL OR v_n = 0 THEN
        RETURN;
    END IF;
    -- unnest() pads short arrays with NULLs, which would mean "the default"
    -- for a value the caller did send: refuse any length but the batch's.
    SELECT a.name, a.len, a.dims INTO v_bad
    FROM (VALUES ('tasks', v_n, pg_catalog.array_ndims(tasks)),
                 ('args', pg_catalog.cardinality(args), pg_catalog.array_ndims(args)),
                 ('queues', pg_catalog.cardinality(queues), pg_catalog.array_ndims(queues)),
                 ('run_ats', pg_catalog.cardinality(run_ats), pg_catalog.array_ndims(run_ats)),
                 ('priorities', pg_catalog.cardinality(priorities), pg_catalog.array_ndims(priorities)),
                 ('idempotency_keys', pg_catalog.cardinality(idempotency_keys), pg_catalog.array_ndims(idempotency_keys)),
                 ('max_attempts', pg_catalog.cardinality(max_attempts), pg_catalog.array_ndims(max_attempts)),
                 ('tenants', pg_catalog.cardinality(tenants), pg_catalog.array_ndims(tenants)),
                 ('labels', pg_catalog.cardinality(labels), pg_catalog.array_ndims(labels))) AS a(name, len, dims)
    WHERE a.len IS NOT NULL AND (a.len <> v_n OR a.dims > 1)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: enqueue_many: % has % elements%, tasks has %: every array given must have one element per job (or be NULL for all defaults)',
                v_bad.name, v_bad.len, CASE WHEN v_bad.dims > 1 THEN pg_catalog.format(' in %s dimensions', v_bad.dims) ELSE '' END, v_n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Every row is checked, also those whose tenant is NULL.
    FOR v_bad IN SELECT u.tenant, pg_catalog.min(u.ord) AS ord
                 FROM unnest(tenants, tasks) WITH ORDINALITY AS u(tenant, task, ord) GROUP BY u.tenant LOOP
        BEGIN
            PERFORM pgsched._check_tenant(v_bad.tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'pgsched: row % of the batch: %', v_bad.ord, pg_catalog.substr(SQLERRM, 10)
                USING ERRCODE = 'insufficient_privilege', COLUMN = 'tenant';
        END;
    END LOOP;
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    -- One set-based pass over the rules (_job_problem is inlined; labels,
    -- JSON here, are checked as JSON); only the first bad row goes through
    -- _check_job, which raises naming it.
    SELECT u.ord, u.task, coalesce(u.queue, 'default') AS queue, coalesce(u.args, '{}') AS args,
           coalesce(u.priority, 0) AS priority, coalesce(u.run_at, v_now) AS run_at, u.max_attempts, u.key,
           u.labels, u.tenant,
           u.labels IS NOT NULL AND (pg_catalog.jsonb_typeof(u.labels) <> 'array'
                                     OR u.labels @? '$[*] ? (@.type() != "string" || @ == "")') AS labels_bad
    INTO v_bad
    FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels)
         WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, ord)
    WHERE (u.labels IS NOT NULL AND (pg_catalog.jsonb_typeof(u.labels) <> 'array'
                                     OR u.labels @? '$[*] ? (@.type() != "string" || @ == "")'))
       OR pgsched._job_problem(u.task, coalesce(u.queue, 'default'), coalesce(u.args, '{}'), coalesce(u.priority, 0),
                               coalesce(u.run_at, v_now), u.max_attempts, u.key, '{}', u.tenant) IS NOT NULL
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        IF v_bad.labels_bad THEN
            RAISE EXCEPTION 'pgsched: row % of the batch: labels % must be a JSON array of non-empty strings (jobs_labels_valid)',
                    v_bad.ord, pgsched._shown(v_bad.labels::text)
                USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_labels_valid', COLUMN = 'labels',
                      SCHEMA = 'pgsched', TABLE = 'jobs';
        END IF;
        PERFORM pgsched._check_job(v_bad.task, v_bad.queue, v_bad.args, v_bad.priority, v_bad.run_at,
                                   v_bad.max_attempts, v_bad.key, '{}', v_bad.tenant, v_bad.ord);
    END IF;
    PERFORM pgsched._check_payload(u.a, v_limit, u.n) FROM unnest(args) WITH ORDINALITY AS u(a, n)
    WHERE pg_catalog.pg_column_size(u.a) > v_limit / 6;

    -- Set-based, the work the insert trigger does row by row for a plain
    -- INSERT; the rows then go in as a trusted writer the trigger skips.
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);

    IF idempotency_keys IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(idempotency_keys) k WHERE k IS NOT NULL) THEN
        -- No keys, nothing to deduplicate: one straight INSERT. Ids are drawn
        -- after the sort by input order, so they grow in input order.
        WITH inserted AS (
            INSERT INTO pgsched.jobs AS j
                (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, tenant, labels)
            SELECT pg_catalog.nextval('pgsched.jobs_id_seq'),
                   pg_catalog.floor(pg_catalog.random() * v_shards)::smallint,
                   CASE WHEN coalesce(u.run_at, v_now) <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
                   coalesce(u.queue, 'default'), u.task, coalesce(u.args, '{}'), coalesce(u.priority, 0),
                   coalesce(u.run_at, v_now), 0, coalesce(u.max_attempts, t.max_attempts, v_default_attempts), u.tenant,
                   CASE WHEN u.labels IS NULL THEN '{}'::text[]
                        ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(u.labels)) END
            FROM unnest(tasks, args, queues, run_ats, priorities, max_attempts, tenants, labels)
                 WITH ORDINALITY AS u(task, args, queue, run_at, priority, max_attempts, tenant, labels, ord)
            LEFT JOIN pgsched.tasks t ON t.name = u.task
            ORDER BY u.ord
            RETURNING j.id, j.queue, j.state
        )
        SELECT pg_catalog.array_agg(i.id ORDER BY i.id),
               pg_catalog.array_agg(DISTINCT i.queue) FILTER (WHERE i.state = 'available'),
               pg_catalog.bool_or(i.state = 'scheduled')
        INTO v_ids, v_queues, v_scheduled
        FROM inserted i;
        PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);
        PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
        IF v_scheduled THEN
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN QUERY SELECT x.o, x.id FROM unnest(v_ids) WITH ORDINALITY AS x(id, o);
        RETURN;
    END IF;

    WITH numbered AS MATERIALIZED (
        -- ids are drawn while the input is read in order, so they grow in
        -- input order (a batch runs first-in, first-out)
        SELECT u.ord, u.task, u.args, coalesce(u.queue, 'default') AS queue, coalesce(u.run_at, v_now) AS run_at,
               u.priority, u.key, u.max_attempts, u.tenant, u.labels,
               pg_catalog.nextval('pgsched.jobs_id_seq') AS id
        FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels)
             WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, ord)
    ), input AS MATERIALIZED (
        SELECT n.*,
               CASE WHEN n.key IS NULL THEN pg_catalog.floor(pg_catalog.random() * v_shards)::smallint
                    ELSE ((pg_catalog.hashtextextended(n.key, 0) % v_shards + v_shards) % v_shards)::smallint
               END AS shard,
               -- only the first row of a key in this batch is inserted
               n.key IS NULL OR n.ord = pg_catalog.min(n.ord) OVER (PARTITION BY n.key, n.tenant) AS first_of_key
        FROM numbered n
    ), taken AS (
        -- Keys are taken in key order, so concurrent batches sharing keys
        -- wait for each other instead of deadlocking. A key whose retention
        -- ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        SELECT i.key, i.tenant, i.id, i.shard, v_now
        FROM input i
        WHERE i.key IS NOT NULL AND i.first_of_key
        ORDER BY i.key
        ON CONFLICT (key, tenant) DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now
        RETURNING k.job_id
    ), inserted AS (
        INSERT INTO pgsched.jobs AS j
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, tenant,
             labels)
        SELECT i.id, i.shard,
               CASE WHEN i.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
               i.queue, i.task, coalesce(i.args, '{}'), coalesce(i.priority, 0), i.run_at, 0,
               coalesce(i.max_attempts, t.max_attempts, v_default_attempts), i.key, i.tenant,
               CASE WHEN i.labels IS NULL THEN '{}'::text[]
                    ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(i.labels)) END
        FROM input i
        LEFT JOIN pgsched.tasks t ON t.name = i.task
        WHERE i.key IS NULL OR i.id IN (SELECT taken.job_id FROM taken)
        ORDER BY i.ord
        RETURNING j.id, j.queue, j.state
    )
    SELECT pg_catalog.array_agg(i.ord ORDER BY i.ord),
           pg_catalog.array_agg(ins.id ORDER BY i.ord),
           pg_catalog.array_agg(i.key ORDER BY i.ord),
           pg_catalog.array_agg(i.tenant ORDER BY i.ord),
           pg_catalog.array_agg(DISTINCT ins.queue) FILTER (WHERE ins.state = 'available'),
           pg_catalog.bool_or(ins.state = 'scheduled')
    INTO v_ords, v_ids, v_keys, v_tenants, v_queues, v_scheduled
    FROM input i
    LEFT JOIN inserted ins ON ins.id = i.id;
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    IF v_scheduled THEN
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;

    -- Rows whose key was taken: look the holder up in a new statement, whose
    -- snapshot sees a concurrent enqueue of the same key that we waited for,
    -- and refuse the batch if it holds other work (PS422, naming the row).
    RETURN QUERY
    SELECT x.o, coalesce(x.id, pgsched._key_holder(x.k, u.task, u.args, x.o, x.t))
    FROM unnest(v_ords, v_ids, v_keys, v_tenants) AS x(o, id, k, t)
    JOIN unnest(tasks, args) WITH ORDINALITY AS u(task, args, n) ON u.n = x.o
    ORDER BY x.o;
END
$$;


DROP FUNCTION IF EXISTS pgsched.enqueue_service(text, jsonb, text, timestamptz, integer, text, integer, text[], text);
-- functions/expire_leases.sql as of the previous revision
-- expire_leases
-- contract: jobs whose lease ran out (their worker died, hung or lost its
-- connection) go back to 'available' at once, keeping their run_at (so they
-- come before newer work, and their start lag shows the time lost), or to 'dead' when their
-- attempts are used up, or to 'cancelled' when cancellation was requested,
-- each with a 'lease_expired' event naming the worker and token that lost
-- the lease. Candidates are locked with SKIP LOCKED and every write re-checks
-- the token, the state and the expiry, so a completion racing the expiry
-- wins cleanly and a stale read never overwrites a newer claim. Returns the
-- number of jobs handled (at most p_limit; call again while it is p_limit).
CREATE OR REPLACE FUNCTION pgsched.expire_leases(
    p_now   timestamptz DEFAULT NULL,
    p_limit integer     DEFAULT 1000,
    p_shard integer     DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_requeued text[];
    v_finished integer;
    v_count integer;
    v_job pgsched.jobs;
    v_expired record;
    v_outcome pgsched.job_state;
BEGIN
    WITH expired AS MATERIALIZED (
        SELECT j.id, j.shard, j.lease_token, j.leased_by, j.lease_expires_at
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.lease_expires_at < v_now
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), requeued AS (
        UPDATE pgsched.jobs j
        SET state = 'available',
            lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
            last_error = pg_catalog.format('lease expired at %s (worker %s)', e.lease_expires_at, e.leased_by)
        FROM expired e
        WHERE j.id = e.id AND j.shard = e.shard AND j.lease_token = e.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
          AND j.attempt < j.max_attempts AND j.cancel_requested_at IS NULL
        RETURNING j.id, j.queue, j.attempt, e.leased_by, e.lease_token, e.lease_expires_at
    ), audit AS (
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        SELECT r.id, v_now, 'lease_expired', r.attempt, r.leased_by, r.lease_token,
               pg_catalog.jsonb_build_object('lease_expires_at', r.lease_expires_at, 'outcome', 'available')
        FROM requeued r, pgsched.config c
        WHERE c.audit
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT r.queue)
    INTO v_count, v_requeued
    FROM requeued r;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_requeued) q;

    -- Out of attempts (or cancel requested): these leave the active table.
    -- Rare, so one fenced DELETE per job keeps the filing simple.
    v_finished := 0;
    FOR v_expired IN
        SELECT j.id, j.shard, j.lease_token
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.lease_expires_at < v_now
          AND (j.attempt >= j.max_attempts OR j.cancel_requested_at IS NOT NULL)
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = v_expired.id AND j.shard = v_expired.shard AND j.lease_token = v_expired.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            v_outcome := CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END;
            PERFORM pgsched._event(v_job.id, v_now, 'lease_expired', v_job.attempt, v_job.leased_by,
                v_job.lease_token,
                pg_catalog.jsonb_build_object('lease_expires_at', v_job.lease_expires_at, 'outcome', v_outcome));
            PERFORM pgsched._finish(
                v_job,
                v_outcome,
                v_now,
                pg_catalog.format('lease expired at %s (worker %s) after attempt %s of %s',
                                  v_job.lease_expires_at, v_job.leased_by, v_job.attempt, v_job.max_attempts),
                NULL,
                pg_catalog.jsonb_build_object('lease_expires_at', v_job.lease_expires_at, 'reason', 'lease_expired'));
            v_finished := v_finished + 1;
        END IF;
    END LOOP;

    RETURN v_count + v_finished;
END
$$;


DROP FUNCTION IF EXISTS pgsched.fail(bigint, bigint, text, timestamptz, boolean, timestamptz, jsonb);
-- functions/fail.sql as of the previous revision
-- fail
-- contract: reports a failed run under its fencing token and returns the
-- job's resulting state: 'scheduled' or 'available' (a retry, at retry_at or
-- after the task/queue backoff), 'dead' (attempts exhausted, or final), or
-- 'cancelled' (cancellation had been requested). A stale token changes
-- nothing and returns 'lease_lost'.
--
-- Each branch is one fenced statement (token and state in its WHERE). The
-- retry branch runs first and excludes cancel-requested jobs; if a cancel
-- lands between the two, the terminal branch catches it.
CREATE OR REPLACE FUNCTION pgsched.fail(
    job_id   bigint,
    token    bigint,
    error    text,
    retry_at timestamptz DEFAULT NULL,
    final    boolean     DEFAULT false,
    p_now    timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_job pgsched.jobs;
    v_state pgsched.job_state;
    v_scope text := pgsched._tenant_scope();
BEGIN
    UPDATE pgsched.jobs j
    SET run_at = v.run_at,
        state = CASE WHEN v.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
        last_error = fail.error
    FROM (
        SELECT j2.id, j2.shard, j2.leased_by,
               coalesce(fail.retry_at, v_now + pgsched._backoff(j2.task, j2.queue, j2.attempt)) AS run_at
        FROM pgsched.jobs j2
        WHERE j2.id = fail.job_id AND j2.lease_token = fail.token
          AND (v_scope IS NULL OR j2.tenant = v_scope)
    ) v
    WHERE j.id = v.id AND j.shard = v.shard
      AND j.lease_token = fail.token AND j.state = 'running'
      AND NOT coalesce(fail.final, false)
      AND j.attempt < j.max_attempts
      AND j.cancel_requested_at IS NULL
    RETURNING j.state, j.attempt, j.queue, j.run_at, v.leased_by
    INTO v_state, v_job.attempt, v_job.queue, v_job.run_at, v_job.leased_by;
    IF FOUND THEN
        PERFORM pgsched._event(fail.job_id, v_now, 'failed', v_job.attempt, v_job.leased_by, fail.token,
            pg_catalog.jsonb_build_object('error', fail.error, 'retry_at', v_job.run_at));
        IF v_state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = fail.job_id AND j.lease_token = fail.token AND j.state = 'running'
      AND (v_scope IS NULL OR j.tenant = v_scope)
      AND (coalesce(fail.final, false) OR j.attempt >= j.max_attempts OR j.cancel_requested_at IS NOT NULL)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        v_state := CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END;
        PERFORM pgsched._finish(v_job, v_state, v_now, fail.error);
        RETURN v_state::text;
    END IF;
    RETURN 'lease_lost';
END
$$;


-- functions/register_tasks.sql as of the previous revision
-- register_tasks
-- contract: upserts task policies from a JSON array of objects with keys
-- name (required), queue, max_attempts, backoff_base, backoff_max,
-- backoff_jitter (seconds). Workers call it at start with the tasks they
-- serve. Returns the number of tasks registered. A session confined to a
-- tenant adds new tasks only: it never changes a policy every tenant shares.
CREATE OR REPLACE FUNCTION pgsched.register_tasks(tasks jsonb)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    IF pg_catalog.jsonb_typeof(register_tasks.tasks) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'pgsched: register_tasks expects a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.tasks AS t (name, queue, max_attempts, backoff_base, backoff_max, backoff_jitter, updated_at)
    SELECT e->>'name', coalesce(e->>'queue', 'default'), (e->>'max_attempts')::integer,
           pg_catalog.make_interval(secs => (e->>'backoff_base')::double precision),
           pg_catalog.make_interval(secs => (e->>'backoff_max')::double precision),
           (e->>'backoff_jitter')::real, pg_catalog.now()
    FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
    ON CONFLICT (name) DO UPDATE
    SET queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts, backoff_base = EXCLUDED.backoff_base,
        backoff_max = EXCLUDED.backoff_max, backoff_jitter = EXCLUDED.backoff_jitter, updated_at = EXCLUDED.updated_at
    -- A session confined to a tenant adds tasks but never changes the policy
    -- of a task every tenant shares.
    WHERE pgsched._tenant_scope() IS NULL
      AND (t.queue, t.max_attempts, t.backoff_base, t.backoff_max, t.backoff_jitter)
          IS DISTINCT FROM (EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.backoff_base,
                            EXCLUDED.backoff_max, EXCLUDED.backoff_jitter);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;


-- functions/retry.sql as of the previous revision
-- retry
-- contract: re-enqueues (redrives) a dead or cancelled job under its own id,
-- due now, with a fresh attempt budget (the task's max_attempts, else the
-- install default) on top of the attempts it used: the attempt counter keeps
-- growing across redrives. Its history rows stay. Returns
-- 'retried', 'active' (the job is queued or running already),
-- 'not_retryable' (it completed) or 'not_found' (also for a job of another
-- tenant when the session is confined to one, see _check_tenant).
CREATE OR REPLACE FUNCTION pgsched.retry(
    job_id bigint,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_last pgsched.job_history;
    v_id bigint;
    v_tenant text;
BEGIN
    -- This function bypasses row-level security, so it confines tenants itself.
    SELECT t.tenant INTO v_tenant
    FROM (SELECT j.tenant FROM pgsched.jobs j WHERE j.id = retry.job_id
          UNION ALL
          SELECT h.tenant FROM pgsched.job_history h WHERE h.id = retry.job_id) t
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            PERFORM pgsched._check_tenant(v_tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN 'not_found';
        END;
    END IF;

    IF EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = retry.job_id) THEN
        RETURN 'active';
    END IF;
    SELECT * INTO v_last
    FROM pgsched.job_history h
    WHERE h.id = retry.job_id
    ORDER BY h.finished_at DESC
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF v_last.state = 'completed' THEN
        RETURN 'not_retryable';
    END IF;

    -- The primary key (id, shard) makes a concurrent second redrive a no-op.
    INSERT INTO pgsched.jobs AS j
        (id, shard, queue, task, args, priority, run_at, idempotency_key, labels, tenant, created_at)
    VALUES (v_last.id, v_last.shard, v_last.queue, v_last.task, v_last.args, v_last.priority, v_now,
            v_last.idempotency_key, v_last.labels, v_last.tenant, v_last.created_at)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO v_id;
    IF v_id IS NULL THEN
        RETURN 'active';
    END IF;
    -- The insert trigger starts every job at attempt 0; carry the count on.
    UPDATE pgsched.jobs j
    SET attempt = v_last.attempt,
        max_attempts = least(v_last.attempt::bigint + j.max_attempts, 1000000)::integer
    WHERE j.id = v_id AND j.shard = v_last.shard;
    PERFORM pgsched._event(v_id, v_now, 'retried', v_last.attempt, NULL, NULL,
        pg_catalog.jsonb_build_object('previous_state', v_last.state));
    RETURN 'retried';
END
$$;


DROP FUNCTION IF EXISTS pgsched.start(bigint[], bigint[], smallint[], timestamptz);
-- functions/start.sql as of the previous revision
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


-- functions/tg_jobs__before_insert.sql as of the previous revision
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


-- functions/tg_schedules__before_write.sql as of the previous revision
-- tg_schedules__before_write
-- contract: a schedule lives on the shard of its name; any change to what a
-- schedule fires (cron, zone, task, args, queue, policies, enabled...) bumps
-- its version, so the next scan withdraws the occurrences expanded under the
-- old version and expands the new one. Works for plain INSERT/UPDATE too,
-- which are refused what upsert_schedule refuses (_check_schedule)
-- (SECURITY DEFINER: pgsched_admin writes the table but not the helpers).
CREATE OR REPLACE FUNCTION pgsched.tg_schedules__before_write()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
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

-- The functions restored above that had been dropped are new objects: their privileges again.
REVOKE EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many, pgsched.start, pgsched.claim, pgsched.fail
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many TO pgsched_enqueue;
GRANT EXECUTE ON FUNCTION pgsched.start, pgsched.claim, pgsched.fail TO pgsched_worker;
