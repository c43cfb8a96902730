-- _claim_limited
-- contract: claim()'s path for a queue with limits (concurrency or rate
-- limits, per-key limits; docs/dispatch.md): leases
-- up to p_n of its due jobs as claim() does, never more than the limits
-- allow at this moment, and returns them in claim()'s shape.
--
-- Claimers of one such queue take turns (a transaction-scoped advisory lock
-- on the queue), so the counts read here stay true until the claim commits:
-- two workers claiming at once cannot exceed a limit. Concurrency counts
-- leases that have not expired (a SIGKILLed worker's slot frees when its
-- lease runs out, with nothing to repair); rates count the starts recorded
-- in pgsched.rate_windows within the last rate_period (a sliding window).
-- As claim() does, its due jobs are read from pgsched.ready in strict order
-- (under tenant fairness the order is the tenants' shares already:
-- _fair_stamp). Per-key limits skip jobs whose key is full, reading at most
-- 1000 candidates. Like claim(), it writes no audit event (the row
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
-- One plan per statement, pruned to the shard when it runs.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_q pgsched.queues;
    v_k integer := p_n;
    v_keyed boolean;
    v_scan integer;
    v_ids bigint[] := '{}';
    v_shards smallint[] := '{}';
    v_slots smallint[] := '{}';
    v_rows tid[] := '{}';
    v_room jsonb := '{}';
    v_left integer;
    v_cand record;
    v_shard smallint;
    v_sids bigint[];
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

    -- Its due jobs in strict order, from pgsched.ready (as claim()).
    FOR v_cand IN
        SELECT r.id, r.shard, r.concurrency_key, r.slot, r.ctid AS row_at
        FROM pgsched.ready r
        WHERE r.queue = p_queue
          AND (r.labels = '{}' OR r.labels <@ coalesce(p_labels, '{}'))
          AND (p_scope IS NULL OR r.tenant = p_scope)
        ORDER BY r.dispatch_group, r.dispatch_rank, r.dispatch_at, r.id
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
        v_slots := v_slots || v_cand.slot;
        v_rows := v_rows || v_cand.row_at;
    END LOOP;
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
        ), taken AS (
            -- Their due rows leave pgsched.ready, found by the addresses read above (and their ids: a row
            -- that moved is left, never another job's), whatever the statistics say.
            DELETE FROM pgsched.ready r
            WHERE r.ctid = ANY (v_rows)
              AND (r.slot, r.ctid, r.id) IN (SELECT u.slot, u.row_at, u.id
                                             FROM unnest(v_slots, v_rows, v_ids) AS u(slot, row_at, id)
                                             WHERE u.id IN (SELECT l.id FROM leased l))
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
