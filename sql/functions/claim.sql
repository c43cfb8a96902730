-- claim
-- contract: leases up to n due jobs of `queues` (skipping paused queues, and
-- jobs whose labels the worker does not all offer) to `worker` for `lease`.
-- Each claimed job gets a new fencing token, larger than any before, and its
-- attempt incremented. A job is never leased twice at once: rows are locked
-- with SKIP LOCKED and re-checked as 'available' by the same UPDATE.
-- The claim writes no audit event: the job's row keeps claimed_at, and an
-- attempt that ends other than completed records its claim then (see
-- pgsched.job_timeline).
--
-- Priority is strict across shards (docs/dispatch.md): a busy worker
-- (start_shard given; workers rotate it) first finds the best due level (its
-- dispatch group and rank, i.e. priority) with one merge of every shard's
-- index head, then claims jobs of that level shard by shard from
-- start_shard, one statement each, so concurrent claimers of tied jobs
-- spread over partitions instead of fighting for the same rows; within a
-- shard that is one index scan in dispatch order (priority DESC, run_at, id;
-- or aged priority, see tg_jobs__dispatch) that stops after n rows, whatever
-- the backlog. What the level cannot fill is claimed by one statement over
-- all shards at once (a merge of every shard's index, strict order). Queues
-- take turns by the same rotation.
--
-- A queue with limits (concurrency or rate) is claimed by _claim_limited,
-- one claimer at a time. Tenant fairness needs no path of its own: its
-- shares are in the stamps the index is ordered by (_fair_stamp).
--
-- With start_shard NULL, each queue is only that one statement over all
-- shards: the cheaper pass when little is queued, which workers use when idle.
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
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz, trace_context jsonb
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
    v_queues text[];
    v_left integer := claim.n;
    v_got integer;
    v_shard smallint;
    v_queue text;
    v_nq integer;
    v_group text;
    v_rank integer;
    v_limited text[];
    -- A session confined to a tenant claims only that tenant's jobs.
    v_scope text := pgsched._tenant_scope();
BEGIN
    -- A lease under a second would run out before its first heartbeat could
    -- renew it: the job would be lost to its worker as it is handed over.
    IF claim.n IS NULL OR claim.n < 1 OR claim.lease IS NULL OR claim.lease < interval '1 second' THEN
        RAISE EXCEPTION 'pgsched: claim needs n >= 1 and a lease of at least 1 second (got n %, lease %)',
                        claim.n, claim.lease
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.shards INTO v_shards FROM pgsched.config c;
    SELECT pg_catalog.array_agg(q) INTO v_queues
    FROM unnest(claim.queues) q
    WHERE NOT EXISTS (SELECT 1 FROM pgsched.queues pq WHERE pq.name = q AND pq.paused);
    IF v_queues IS NULL THEN
        RETURN;
    END IF;
    -- Queues with limits take their own path,
    -- in name order: their locks are always taken in one order (no deadlock).
    SELECT pg_catalog.array_agg(pq.name ORDER BY pq.name) INTO v_limited FROM pgsched.queues pq
    WHERE pq.name = ANY (v_queues)
      AND (pq.concurrency IS NOT NULL OR pq.key_concurrency IS NOT NULL OR pq.rate IS NOT NULL
           OR pq.key_rate IS NOT NULL);
    IF v_limited IS NOT NULL THEN
        FOREACH v_queue IN ARRAY v_limited LOOP
            RETURN QUERY SELECT * FROM pgsched._claim_limited(claim.worker, v_queue, v_left, claim.lease,
                                                              claim.labels, v_scope, v_now);
            GET DIAGNOSTICS v_got = ROW_COUNT;
            v_left := v_left - v_got;
            IF v_left <= 0 THEN
                RETURN;
            END IF;
        END LOOP;
        SELECT pg_catalog.array_agg(q) INTO v_queues FROM unnest(v_queues) q WHERE q <> ALL (v_limited);
        IF v_queues IS NULL THEN
            RETURN;
        END IF;
    END IF;

    v_nq := pg_catalog.cardinality(v_queues);

    FOR k IN 0 .. v_nq - 1 LOOP
        -- Queues take turns: a busy worker's claims start at a rotating one.
        v_queue := v_queues[((coalesce(claim.start_shard, 0) + k) % v_nq + v_nq) % v_nq + 1];
        IF claim.start_shard IS NOT NULL THEN
            -- The best due level (dispatch group and rank: the priority) over
            -- all shards, one merge of their index heads; none: nothing due.
            SELECT j.dispatch_group, j.dispatch_rank INTO v_group, v_rank
            FROM pgsched.jobs j
            WHERE j.state = 'available'
              AND j.queue = v_queue
              AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
              AND (v_scope IS NULL OR j.tenant = v_scope)
            ORDER BY j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id
            LIMIT 1;
            CONTINUE WHEN NOT FOUND;
            -- Jobs of that level only, shard by shard from the start shard.
            FOR i IN 0 .. v_shards - 1 LOOP
                v_shard := ((claim.start_shard + i) % v_shards + v_shards) % v_shards;
                RETURN QUERY
                WITH due AS MATERIALIZED (
                    SELECT j.id
                    FROM pgsched.jobs j
                    WHERE j.shard = v_shard
                      AND j.state = 'available'
                      AND j.queue = v_queue
                      AND j.dispatch_group = v_group
                      AND j.dispatch_rank = v_rank
                      -- the first arm keeps the row estimate right (most jobs need no labels)
                      AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
                      AND (v_scope IS NULL OR j.tenant = v_scope)
                    ORDER BY j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id
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
                )
                SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
                       l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at,
                       l.trace_context
                FROM leased l;
                GET DIAGNOSTICS v_got = ROW_COUNT;
                v_left := v_left - v_got;
                IF v_left <= 0 THEN
                    RETURN;
                END IF;
            END LOOP;
        END IF;

        -- The rest (or, with start_shard NULL, all of it) in one statement
        -- over every shard: a merge of their indexes, strict order.
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT j.id, j.shard
            FROM pgsched.jobs j
            WHERE j.state = 'available'
              AND j.queue = v_queue
              AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
              AND (v_scope IS NULL OR j.tenant = v_scope)
            ORDER BY j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id
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
        )
        SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at, l.trace_context
        FROM leased l;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        IF v_left <= 0 THEN
            RETURN;
        END IF;
    END LOOP;
END
$$;
