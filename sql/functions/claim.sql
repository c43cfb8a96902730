-- claim
-- contract: leases up to n due jobs of `queues` (skipping paused queues, and
-- jobs whose labels the worker does not all offer) to `worker` for `lease`.
-- Each claimed job gets a new fencing token, larger than any before, and its
-- attempt incremented. A job is never leased twice at once: its row in
-- pgsched.jobs is locked with SKIP LOCKED and re-checked as 'available' by
-- the statement that leases it.
-- Its unlogged ring of due jobs, emptied by a crash or a promotion, is
-- filled again from pgsched.jobs before the first claim reads it
-- (_rebuild_ready).
-- The claim writes no audit event: the job's row keeps claimed_at, and an
-- attempt that ends other than completed records its claim then (see
-- pgsched.job_timeline).
--
-- Priority is strict (docs/dispatch.md): a queue's due jobs are read from
-- pgsched.ready, the due jobs' own ring of slots, in dispatch order
-- (priority DESC, run_at, id; or aged priority, see tg_jobs__dispatch) by one
-- index scan per slot, merged, that stops after n jobs whatever the backlog
-- and whatever the dead entries of jobs claimed before (a slot is emptied
-- whole once its jobs are claimed: rotate_ready). Queues take turns:
-- start_shard, which busy workers rotate, picks the queue read first.
--
-- A queue with limits (concurrency or rate) is claimed by _claim_limited,
-- one claimer at a time. Tenant fairness needs no path of its own: its
-- shares are in the stamps the index is ordered by (_fair_stamp).
--
-- starts: how many of the claimed jobs take a handler slot at once (a
-- worker counts those a slot frees up for within moments too, and records
-- the start again if one waits longer after all; start_tasks: only jobs of
-- these tasks; NULL: any). The first `starts` in
-- claim order are recorded as started by the claim itself (started_at,
-- deadline_at: what pgsched.start() records), so a job that runs at once
-- costs no start() statement and no second row version; they come back with
-- started_at and timeout set. The others (and a job whose cancel was
-- requested) have started_at NULL: start() records them when a slot takes
-- them. Queues with limits start nothing here.
-- The signature before starts and start_tasks (and its result without
-- started_at and timeout) is replaced, not overloaded, so a call with seven
-- arguments stays unambiguous.
DROP FUNCTION IF EXISTS pgsched.claim(text, text[], integer, interval, text[], integer, timestamptz);
CREATE OR REPLACE FUNCTION pgsched.claim(
    worker      text,
    queues      text[],
    n           integer,
    lease       interval,
    labels      text[]      DEFAULT '{}',
    start_shard integer     DEFAULT NULL,
    p_now       timestamptz DEFAULT NULL,
    starts      integer     DEFAULT 0,
    start_tasks text[]      DEFAULT NULL
)
RETURNS TABLE (
    id bigint, shard smallint, queue text, task text, args jsonb, attempt integer,
    max_attempts integer, lease_token bigint, idempotency_key text, run_at timestamptz,
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz, trace_context jsonb,
    started_at timestamptz, timeout interval
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan for every call instead of planning the partitioned statement
-- again at each one; and that plan the one that reads a batch's worth,
-- whatever the statistics said when it was made (made on empty tables, the
-- planner would rather sort every due row, or scan the jobs). The sort of
-- the batch it returns is then "disabled" and so costed huge: no JIT, which
-- would compile it at every call for a second or more.
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    -- The clock now, not at transaction start: the lease runs from the claim.
    v_clock timestamptz := pgsched._clock(p_now);
    v_now timestamptz := coalesce(v_clock, pg_catalog.clock_timestamp());
    v_queues text[];
    v_left integer := claim.n;
    v_starts integer := greatest(coalesce(claim.starts, 0), 0);
    v_got integer;
    v_queue text;
    v_nq integer;
    v_limited text[];
    -- A session confined to a tenant claims only that tenant's jobs.
    v_scope text := pgsched._caller_scope();
    -- the batch's due rows (in claim order), and the range of their shards and slots
    v_ids bigint[];
    v_shards smallint[];
    v_slots smallint[];
    v_rows tid[];
    v_lo smallint;
    v_hi smallint;
    v_slot_lo smallint;
    v_slot_hi smallint;
BEGIN
    -- A lease under a second would run out before its first heartbeat could
    -- renew it: the job would be lost to its worker as it is handed over.
    IF claim.n IS NULL OR claim.n < 1 OR claim.lease IS NULL OR claim.lease < interval '1 second' THEN
        RAISE EXCEPTION 'pgsched: claim needs n >= 1 and a lease of at least 1 second (got n %, lease %)',
                        claim.n, claim.lease
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The ring of due jobs is unlogged: after a crash or a promotion it is
    -- filled again from pgsched.jobs before anything is claimed from it.
    IF NOT EXISTS (SELECT FROM pgsched.ready_intact) THEN
        PERFORM pgsched._rebuild_ready();
    END IF;
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
            RETURN QUERY SELECT l.*, NULL::timestamptz, NULL::interval
                         FROM pgsched._claim_limited(claim.worker, v_queue, v_left, claim.lease,
                                                     claim.labels, v_scope, v_now) l;
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
        -- The queue's due rows in strict order (one merge of the ready
        -- ring's slots), locked with SKIP LOCKED so that concurrent claimers
        -- pass each other's. A statement of their own: the next one then
        -- knows their shards and slots as values, and PostgreSQL prunes the
        -- other partitions of pgsched.jobs and pgsched.ready before it
        -- starts (a value computed inside the statement prunes only as it
        -- runs, after every partition's scans and indexes were set up: that
        -- setup was most of an empty claim's 300 us).
        SELECT pg_catalog.array_agg(d.id), pg_catalog.array_agg(d.shard), pg_catalog.array_agg(d.slot),
               pg_catalog.array_agg(d.row_at), pg_catalog.min(d.shard), pg_catalog.max(d.shard),
               pg_catalog.min(d.slot), pg_catalog.max(d.slot)
        INTO v_ids, v_shards, v_slots, v_rows, v_lo, v_hi, v_slot_lo, v_slot_hi
        FROM (
            SELECT r.slot, r.ctid AS row_at, r.id, r.shard
            FROM pgsched.ready r
            WHERE r.queue = v_queue
              -- the first arm keeps the row estimate right (most jobs need no labels)
              AND (r.labels = '{}' OR r.labels <@ coalesce(claim.labels, '{}'))
              AND (v_scope IS NULL OR r.tenant = v_scope)
            ORDER BY r.dispatch_group, r.dispatch_rank, r.dispatch_at, r.id
            LIMIT v_left
            FOR UPDATE SKIP LOCKED
        ) d;
        CONTINUE WHEN v_ids IS NULL;
        -- Then their jobs, locked with SKIP LOCKED too: a job someone else is
        -- changing (a cancel, a replace) is left to them with its row. A row
        -- whose job is no longer due (left behind by a change that raced a
        -- claim) goes.
        RETURN QUERY
        WITH due AS MATERIALIZED (
            -- in claim order (ord)
            SELECT u.id, u.shard, u.slot, u.row_at, u.ord
            FROM unnest(v_ids, v_shards, v_slots, v_rows) WITH ORDINALITY AS u(id, shard, slot, row_at, ord)
        ), locked AS MATERIALIZED (
            -- ids as an array: one index probe each, whatever the statistics say, never a scan of the
            -- partition (a join would leave that choice to the planner); only in the partitions of the
            -- batch's shards
            SELECT j.id, j.task, j.cancel_requested_at
            FROM pgsched.jobs j
            WHERE j.id = ANY (v_ids) AND j.shard = ANY (v_shards) AND j.shard BETWEEN v_lo AND v_hi
              AND j.state = 'available' AND j.queue = v_queue
            FOR UPDATE SKIP LOCKED
        ), gone AS MATERIALIZED (
            -- the rows of the jobs leased, and those whose job is no longer due
            SELECT d.slot, d.row_at, d.id
            FROM due d
            WHERE d.id IN (SELECT l.id FROM locked l)
               OR NOT EXISTS (SELECT FROM pgsched.jobs j
                              WHERE j.id = d.id AND j.shard = d.shard AND j.shard BETWEEN v_lo AND v_hi
                                AND j.state = 'available' AND j.queue = v_queue)
        ), taken AS (
            -- by their row addresses (locked above, so they stay put): one TID lookup each, whatever the
            -- statistics say (no index of pgsched.ready leads with them), never a scan of the queue's rows;
            -- not also "ctid = ANY (all of them)", which PostgreSQL then checks for every row (1,000 jobs:
            -- 2.6 ms of a 22 ms claim)
            DELETE FROM pgsched.ready r
            WHERE r.slot BETWEEN v_slot_lo AND v_slot_hi
              AND (r.slot, r.ctid, r.id) IN (SELECT g.slot, g.row_at, g.id FROM gone g)
        ), starting AS MATERIALIZED (
            -- the first v_starts in claim order start now; the others when a slot takes them (start())
            SELECT l.id
            FROM locked l
            JOIN due d ON d.id = l.id
            WHERE l.cancel_requested_at IS NULL AND (claim.start_tasks IS NULL OR l.task = ANY (claim.start_tasks))
            ORDER BY d.ord
            LIMIT v_starts
        ), clock AS MATERIALIZED (
            -- as start() records it: the clock when this statement writes, read once, so never before a
            -- dependency's finished_at (its completion committed before the statement began), and one reading
            -- for every start and deadline (deadline - start is the job's limit to the microsecond)
            SELECT coalesce(v_clock, pg_catalog.clock_timestamp()) AS at
        ), leased AS (
            UPDATE pgsched.jobs j
            SET state = 'running',
                attempt = j.attempt + 1,
                lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                leased_by = claim.worker,
                lease_expires_at = v_now + claim.lease,
                claimed_at = v_now,
                started_at = CASE WHEN j.id IN (SELECT s.id FROM starting s) THEN (SELECT c.at FROM clock c) END,
                deadline_at = CASE WHEN j.id IN (SELECT s.id FROM starting s)
                    THEN (SELECT c.at FROM clock c) + coalesce(j.timeout, (SELECT t.timeout FROM pgsched.tasks t
                                                      WHERE t.name = j.task AND (t.tenant IS NULL OR t.tenant = j.tenant)
                                                      ORDER BY t.tenant NULLS LAST LIMIT 1))
                    ELSE j.deadline_at END,
                unserved_since = CASE WHEN j.id IN (SELECT s.id FROM starting s) THEN NULL
                                      ELSE j.unserved_since END
            WHERE j.id = ANY (ARRAY(SELECT l.id FROM locked l))
              AND j.shard = ANY (v_shards) AND j.shard BETWEEN v_lo AND v_hi
              AND j.state = 'available'
            RETURNING j.*
        )
        SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at, l.trace_context,
               l.started_at, l.deadline_at - l.started_at
        FROM leased l
        ORDER BY l.dispatch_group, l.dispatch_rank, l.dispatch_at, l.id;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        -- (counted as if each started: a later queue's jobs then wait for start(), never start twice)
        v_starts := greatest(v_starts - v_got, 0);
        IF v_left <= 0 THEN
            RETURN;
        END IF;
    END LOOP;
END
$$;
