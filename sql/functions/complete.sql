-- complete
-- contract: finishes the jobs whose fencing token is still current, in one
-- statement per shard of the batch: each accepted job leaves pgsched.jobs and enters
-- pgsched.job_history as 'completed' with its result (its claim and
-- completion are read from that row: pgsched.job_timeline; no audit event).
-- A stale token (the lease expired and the job was handed to someone else, or
-- it already finished) changes nothing, and so does a lease that has run out
-- although no one has expired it yet (claim() already counts its slot free). Returns one row per input job saying
-- whether it was accepted. Each accepted job sends its status event on
-- pgsched_events when pgsched.config.events is on (docs/events.md). Waiting
-- jobs whose last dependency this completes become due in the same
-- transaction (docs/dependencies.md). shards, when given, lets each lookup go straight
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
-- Each job is found by primary-key probes, whatever the statistics say: a
-- plan made while the partitions held a page or two (a sequential scan, or
-- a hash join over whole indexes) reads, under a pinned xmin horizon, every
-- dead row version of every job that ran since, at each call (10x slower).
SET enable_seqscan = off
-- One plan for every call, whatever the batch's size: a custom plan would
-- plan the partitioned statement again at each call, for each shard of the
-- batch (5 ms a call of 100 jobs over 8 shards); the generic one prunes to
-- the shard when it starts, and is linear in the batch (probes by id, pairs
-- checked in a hash, results found by id). No JIT for plans costed "disabled".
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    -- The lease is checked against the clock when the statement runs, as claim() reads it.
    v_live timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_config pgsched.config;
    v_scope text := pgsched._caller_scope();
    v_shard smallint;
    v_ids bigint[];
    v_tokens bigint[];
    v_by_id jsonb;
BEGIN
    SELECT * INTO v_config FROM pgsched.config;
    -- The results by job id, once for the call and found by a binary search
    -- (never a pass over the batch per job); none given, none built.
    IF complete.results IS NOT NULL THEN
        SELECT pg_catalog.jsonb_object_agg(u.id::text, u.result) INTO v_by_id
        FROM unnest(complete.job_ids, complete.results) AS u(id, result)
        WHERE u.id IS NOT NULL AND u.result IS NOT NULL;
    END IF;
    -- One statement per shard of the batch, in that shard's partition only.
    -- A job given without its shard gets it from one primary-key probe per
    -- partition (none found: NULL, and the job is not accepted).
    FOR v_shard, v_ids, v_tokens IN
        SELECT s.shard, pg_catalog.array_agg(s.id), pg_catalog.array_agg(s.token)
        FROM (
            SELECT u.id, u.token,
                   coalesce(u.shard, (SELECT f.shard FROM pgsched.jobs f WHERE f.id = u.id LIMIT 1)) AS shard
            FROM unnest(complete.job_ids, complete.tokens, complete.shards) AS u(id, token, shard)
            WHERE u.id IS NOT NULL
        ) s
        GROUP BY s.shard
        ORDER BY s.shard
    LOOP
        RETURN QUERY
        WITH input AS (
            SELECT u.id, u.token FROM unnest(v_ids, v_tokens) AS u(id, token)
        ), done AS (
            -- Checks the token in the statement that writes; a current token is a
            -- running job (jobs_state_valid: only a running job has one). The ids
            -- are the index condition: one probe each. No filter on state: a
            -- partial index "WHERE state = 'running'" would then be a candidate,
            -- and a scan of it reads the dead entries of every job that ran since
            -- the last vacuum. Each id with its own token, looked up in one hash
            -- of the batch: a join here would be planned for the ten rows a
            -- generic plan guesses, and pass over the batch once per job.
            DELETE FROM pgsched.jobs j
            WHERE j.shard = v_shard AND j.id = ANY (v_ids)
              AND ((j.id, j.lease_token) IN (SELECT u.id, u.token FROM input u)) IS TRUE
              AND j.lease_expires_at > v_live
              AND (v_scope IS NULL OR j.tenant = v_scope)  -- tokens are guessable, tenants are not
            RETURNING j.*, v_by_id -> (j.id::text) AS result
        ), history AS (
            INSERT INTO pgsched.job_history
                (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
                 leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule,
                 service, claimed_at, concurrency_key, timeout, progress, progress_note, progress_at, steps,
                 memory_limit, cpu_limit)
            SELECT d.id, d.shard, 'completed', d.queue, d.task, d.args, d.priority, d.run_at, d.attempt,
                   d.max_attempts, d.lease_token, d.leased_by, d.idempotency_key, d.labels, d.tenant,
                   -- a worker that never called start() ran it from its claim on
                   d.created_at, coalesce(d.started_at, d.claimed_at), v_now, d.result, NULL, d.schedule, d.service,
                   d.claimed_at, d.concurrency_key, d.timeout, d.progress, d.progress_note, d.progress_at, d.steps,
                   d.memory_limit, d.cpu_limit
            FROM done d
        ), keys AS (
            UPDATE pgsched.idempotency_keys k
            SET expires_at = CASE WHEN d.service OR k.scope = 'active' THEN v_now
                                  ELSE v_now + v_config.idempotency_retention END
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
    END LOOP;
    -- Dependents of what completed become due in this transaction; without
    -- any, one index probe. A statement of its own (see _release_dependents).
    IF EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = ANY (complete.job_ids)) THEN
        PERFORM pgsched._release_dependents(complete.job_ids, v_now);
    END IF;
END
$$;
