-- 0014: limited claims read shard by shard and write no audit event

-- _claim_limited loses its audit parameter (claims write no audit event) and returns trace_context
-- as claim() does: dropped first.
DROP FUNCTION pgsched._claim_limited(text, text, integer, interval, text[], text, timestamptz, boolean);

-- functions/_claim_limited.sql
-- _claim_limited
-- contract: claim()'s path for a queue with a dispatch policy (concurrency
-- or rate limits, per-key limits, tenant fairness; docs/dispatch.md): leases
-- up to p_n of its due jobs as claim() does, never more than the limits
-- allow at this moment, and returns them in claim()'s shape.
--
-- Claimers of one such queue take turns (a transaction-scoped advisory lock
-- on the queue), so the counts read here stay true until the claim commits:
-- two workers claiming at once cannot exceed a limit. Concurrency counts
-- leases that have not expired (a SIGKILLed worker's slot frees when its
-- lease runs out, with nothing to repair); rates count the starts recorded
-- in pgsched.rate_windows within the last rate_period (a sliding window).
-- Under fairness, the tenants with due jobs (one index probe each) are taken
-- in turn (round robin), ceil(n / tenants) jobs each, heads first.
-- Without fairness, shards are read one at a time from a rotating one (as
-- claim() does for a busy worker), so a batch is usually one statement.
-- Per-key limits skip jobs whose key is full, reading at most 1000
-- candidates per shard. Like claim(), it writes no audit event (the row
-- keeps claimed_at; see pgsched.job_timeline).
CREATE OR REPLACE FUNCTION pgsched._claim_limited(
    p_worker text,
    p_queue  text,
    p_n      integer,
    p_lease  interval,
    p_labels text[],
    p_scope  text,
    p_now    timestamptz
)
RETURNS TABLE (
    id bigint, shard smallint, queue text, task text, args jsonb, attempt integer,
    max_attempts integer, lease_token bigint, idempotency_key text, run_at timestamptz,
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz, trace_context jsonb
)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan per statement, pruned to the shard when it runs (as claim()).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_q pgsched.queues;
    v_k integer := p_n;
    v_keyed boolean;
    v_groups text[];
    v_ng integer;
    v_off integer;
    v_per integer;
    v_scan integer;
    v_ids bigint[] := '{}';
    v_shards smallint[] := '{}';
    v_room jsonb := '{}';
    v_left integer;
    v_cand record;
    v_shard smallint;
    v_sids bigint[];
    v_nshards integer;
BEGIN
    SELECT * INTO v_q FROM pgsched.queues q WHERE q.name = p_queue;
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pgsched: claims from queue % (a dispatch policy) must run in READ COMMITTED', p_queue
            USING ERRCODE = 'invalid_transaction_state',
                  HINT = 'The limits are counted under a lock; an older snapshot would not see the latest claims.';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgsched.dispatch'), pg_catalog.hashtext(p_queue));

    IF v_q.concurrency IS NOT NULL THEN
        v_k := least(v_k, v_q.concurrency - (
            SELECT pg_catalog.count(*) FROM pgsched.jobs j
            WHERE j.state = 'running' AND j.queue = p_queue AND j.lease_expires_at > p_now)::integer);
    END IF;
    IF v_q.rate IS NOT NULL THEN
        v_k := least(v_k, v_q.rate - coalesce((
            SELECT pg_catalog.count(*) FROM pgsched.rate_windows w, unnest(w.starts) s
            WHERE w.queue = p_queue AND w.rate_key = '' AND s > p_now - v_q.rate_period), 0)::integer);
    END IF;
    IF v_k <= 0 THEN
        RETURN;
    END IF;
    v_keyed := v_q.key_concurrency IS NOT NULL OR v_q.key_rate IS NOT NULL;
    v_scan := CASE WHEN v_keyed THEN least(v_k * 10 + 100, 1000) ELSE v_k END;

    IF v_q.tenant_fairness THEN
        -- The tenants with due jobs: a loose scan of the claim index.
        WITH RECURSIVE g AS (
            (SELECT j.dispatch_group AS grp FROM pgsched.jobs j
             WHERE j.state = 'available' AND j.queue = p_queue
             ORDER BY j.dispatch_group LIMIT 1)
            UNION ALL
            SELECT (SELECT j.dispatch_group FROM pgsched.jobs j
                    WHERE j.state = 'available' AND j.queue = p_queue AND j.dispatch_group > g.grp
                    ORDER BY j.dispatch_group LIMIT 1)
            FROM g WHERE g.grp IS NOT NULL
        )
        SELECT pg_catalog.array_agg(g.grp) INTO v_groups FROM g WHERE g.grp IS NOT NULL
          AND (p_scope IS NULL OR g.grp = p_scope);
        v_ng := coalesce(pg_catalog.cardinality(v_groups), 0);
        IF v_ng = 0 THEN
            RETURN;
        END IF;
        -- Turns start where the last claims left off, with no cursor to
        -- write: the lease token sequence moved by one per job leased since,
        -- so a claim that served k tenants moves the next start k tenants on.
        SELECT ((s.last_value - CASE WHEN s.is_called THEN 0 ELSE 1 END) % v_ng)::integer INTO v_off
        FROM pgsched.lease_token_seq s;
        v_groups := v_groups[v_off + 1 :] || v_groups[: v_off];
        v_ng := least(v_ng, v_k);
        v_per := CASE WHEN v_keyed THEN v_scan ELSE (v_k + v_ng - 1) / v_ng END;
        FOR v_cand IN
            SELECT c.id, c.shard, c.concurrency_key
            FROM unnest(v_groups[1 : v_ng]) WITH ORDINALITY AS g(grp, pos)
            CROSS JOIN LATERAL (
                SELECT j.id, j.shard, j.concurrency_key,
                       pg_catalog.row_number() OVER (ORDER BY j.dispatch_rank, j.dispatch_at, j.id) AS rn
                FROM (SELECT j.id, j.shard, j.concurrency_key, j.dispatch_rank, j.dispatch_at
                      FROM pgsched.jobs j
                      WHERE j.state = 'available' AND j.queue = p_queue AND j.dispatch_group = g.grp
                        AND (j.labels = '{}' OR j.labels <@ coalesce(p_labels, '{}'))
                        AND (p_scope IS NULL OR j.tenant = p_scope)
                      ORDER BY j.dispatch_rank, j.dispatch_at, j.id
                      LIMIT v_per) j
            ) c
            ORDER BY c.rn, g.pos
            LIMIT v_scan
        LOOP
            EXIT WHEN pg_catalog.cardinality(v_ids) >= v_k;
            IF v_keyed AND v_cand.concurrency_key IS NOT NULL THEN
                v_left := pgsched._key_room(v_q, v_cand.concurrency_key, p_now, v_room);
                CONTINUE WHEN v_left <= 0;
                v_room := v_room || pg_catalog.jsonb_build_object(v_cand.concurrency_key, v_left - 1);
            END IF;
            v_ids := v_ids || v_cand.id;
            v_shards := v_shards || v_cand.shard;
        END LOOP;
    ELSE
        -- Shard by shard from a rotating one, as claim() does for a busy
        -- worker: the batch usually comes from one partition, one statement.
        SELECT c.shards INTO v_nshards FROM pgsched.config c;
        SELECT ((s.last_value - CASE WHEN s.is_called THEN 0 ELSE 1 END) % v_nshards)::integer INTO v_off
        FROM pgsched.lease_token_seq s;
        FOR i IN 0 .. v_nshards - 1 LOOP
            EXIT WHEN pg_catalog.cardinality(v_ids) >= v_k;
            v_shard := ((v_off + i) % v_nshards)::smallint;
            FOR v_cand IN
                SELECT j.id, j.shard, j.concurrency_key
                FROM pgsched.jobs j
                WHERE j.shard = v_shard AND j.state = 'available' AND j.queue = p_queue
                  AND (j.labels = '{}' OR j.labels <@ coalesce(p_labels, '{}'))
                  AND (p_scope IS NULL OR j.tenant = p_scope)
                ORDER BY j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id
                LIMIT v_scan
            LOOP
                EXIT WHEN pg_catalog.cardinality(v_ids) >= v_k;
                IF v_keyed AND v_cand.concurrency_key IS NOT NULL THEN
                    v_left := pgsched._key_room(v_q, v_cand.concurrency_key, p_now, v_room);
                    CONTINUE WHEN v_left <= 0;
                    v_room := v_room || pg_catalog.jsonb_build_object(v_cand.concurrency_key, v_left - 1);
                END IF;
                v_ids := v_ids || v_cand.id;
                v_shards := v_shards || v_cand.shard;
            END LOOP;
        END LOOP;
    END IF;
    IF pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;

    -- One statement per shard, pruned to its partition (as claim() does).
    FOR v_shard IN SELECT DISTINCT u.s FROM unnest(v_shards) AS u(s) ORDER BY 1 LOOP
        v_sids := ARRAY(SELECT u.i FROM unnest(v_ids, v_shards) AS u(i, s) WHERE u.s = v_shard);
        RETURN QUERY
        WITH locked AS MATERIALIZED (
            SELECT j.id
            FROM pgsched.jobs j
            WHERE j.shard = v_shard AND j.id = ANY (v_sids) AND j.state = 'available'
            ORDER BY j.id
            FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE pgsched.jobs j
            SET state = 'running',
                attempt = j.attempt + 1,
                lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                leased_by = p_worker,
                lease_expires_at = p_now + p_lease,
                claimed_at = p_now,
                started_at = NULL
            WHERE j.shard = v_shard AND j.id = ANY (ARRAY(SELECT l.id FROM locked l)) AND j.state = 'available'
            RETURNING j.*
        ), started AS (
            -- The window keeps the starts inside the period, oldest first.
            INSERT INTO pgsched.rate_windows AS w (queue, rate_key, starts)
            SELECT p_queue, k.rate_key, pg_catalog.array_fill(p_now, ARRAY[k.n])
            FROM (SELECT ''::text AS rate_key, pg_catalog.count(*)::integer AS n FROM leased
                  WHERE v_q.rate IS NOT NULL HAVING pg_catalog.count(*) > 0
                  UNION ALL
                  SELECT l.concurrency_key, pg_catalog.count(*)::integer FROM leased l
                  WHERE v_q.key_rate IS NOT NULL AND l.concurrency_key IS NOT NULL
                  GROUP BY l.concurrency_key) k
            ON CONFLICT ON CONSTRAINT rate_windows_pkey DO UPDATE
            SET starts = ARRAY(SELECT s FROM unnest(w.starts) s WHERE s > p_now - v_q.rate_period ORDER BY s)
                         || EXCLUDED.starts
        )
        SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at, l.trace_context
        FROM leased l;
    END LOOP;
END
$$;


-- functions/claim.sql
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
-- Shards are visited one statement each, starting at start_shard (workers
-- rotate it), so concurrent claimers spread over partitions instead of
-- fighting for the same rows; within a shard, each queue is one index scan
-- in dispatch order (priority DESC, run_at, id; or aged priority, see
-- tg_jobs__dispatch) that stops after n rows, whatever the backlog. Queues
-- take turns by the same rotation. Priority orders jobs within a shard and
-- queue; across shards it holds within one rotation.
--
-- A queue with a dispatch policy (concurrency or rate limits, tenant
-- fairness) is claimed by _claim_limited, one claimer at a time.
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
    v_limited text[];
    -- A session confined to a tenant claims only that tenant's jobs.
    v_scope text := pgsched._tenant_scope();
BEGIN
    IF claim.n IS NULL OR claim.n < 1 OR claim.lease IS NULL OR claim.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: claim needs n >= 1 and a positive lease' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.shards INTO v_shards FROM pgsched.config c;
    SELECT pg_catalog.array_agg(q) INTO v_queues
    FROM unnest(claim.queues) q
    WHERE NOT EXISTS (SELECT 1 FROM pgsched.queues pq WHERE pq.name = q AND pq.paused);
    IF v_queues IS NULL THEN
        RETURN;
    END IF;
    -- Queues with a dispatch policy (limits, fairness) take their own path,
    -- in name order: their locks are always taken in one order (no deadlock).
    SELECT pg_catalog.array_agg(pq.name ORDER BY pq.name) INTO v_limited FROM pgsched.queues pq
    WHERE pq.name = ANY (v_queues)
      AND (pq.concurrency IS NOT NULL OR pq.key_concurrency IS NOT NULL OR pq.rate IS NOT NULL
           OR pq.key_rate IS NOT NULL OR pq.tenant_fairness);
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
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at, l.trace_context
        FROM leased l;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        EXIT WHEN v_left <= 0;
    END LOOP;
END
$$;

REVOKE EXECUTE ON FUNCTION pgsched._claim_limited FROM PUBLIC;
