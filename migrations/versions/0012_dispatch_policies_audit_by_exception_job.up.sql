-- 0012: dispatch policies, audit by exception, job timeline

-- enqueue() gains concurrency_key: dropped first, created anew below.
DROP FUNCTION pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text, interval, bigint[],
                              text, jsonb);

-- Audit by exception: the history row keeps the last attempt's claim
-- (pgsched.job_timeline derives the claim and completion of a job that
-- succeeds from it).
ALTER TABLE pgsched.job_history ADD COLUMN claimed_at timestamptz;
COMMENT ON TABLE pgsched.job_events IS
    'Audit trail by exception: the transitions the job''s row cannot tell (the claim and completion of a job that succeeds are read from job_history); pgsched.job_timeline gives every transition. Partitioned by day.';

-- Dispatch policies (docs/dispatch.md).
ALTER TABLE pgsched.jobs
    ADD COLUMN concurrency_key text,
    ADD COLUMN dispatch_group  text        NOT NULL DEFAULT '',
    ADD COLUMN dispatch_rank   integer     NOT NULL DEFAULT 0,
    ADD COLUMN dispatch_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    ADD CONSTRAINT jobs_concurrency_key_length CHECK (pg_catalog.length(concurrency_key) BETWEEN 1 AND 200);
-- Strict priority for every queue until one is configured: the old claim order.
UPDATE pgsched.jobs SET dispatch_rank = -priority, dispatch_at = run_at;
ALTER TABLE pgsched.job_history ADD COLUMN concurrency_key text;
ALTER TABLE pgsched.tasks ADD COLUMN labels text[];
ALTER TABLE pgsched.queues
    ADD COLUMN concurrency     integer,
    ADD COLUMN key_concurrency integer,
    ADD COLUMN rate            integer,
    ADD COLUMN key_rate        integer,
    ADD COLUMN rate_period     interval,
    ADD COLUMN aging           interval,
    ADD COLUMN tenant_fairness boolean NOT NULL DEFAULT false,
    ADD COLUMN labels          text[],
    ADD CONSTRAINT queues_concurrency_range CHECK (concurrency BETWEEN 1 AND 1000000 AND key_concurrency BETWEEN 1 AND 1000000),
    ADD CONSTRAINT queues_rate_range CHECK (rate BETWEEN 1 AND 10000 AND key_rate BETWEEN 1 AND 10000),
    ADD CONSTRAINT queues_rate_period CHECK (
        (rate_period IS NOT NULL) = (rate IS NOT NULL OR key_rate IS NOT NULL)
        AND rate_period BETWEEN interval '1 millisecond' AND interval '1 day'),
    ADD CONSTRAINT queues_aging_range CHECK (aging BETWEEN interval '1 millisecond' AND interval '1 day');

CREATE TABLE pgsched.rate_windows (
    queue    text          NOT NULL,
    rate_key text          NOT NULL,
    starts   timestamptz[] NOT NULL DEFAULT '{}',
    CONSTRAINT rate_windows_pkey PRIMARY KEY (queue, rate_key)
);
COMMENT ON TABLE pgsched.rate_windows IS
    'Start times within the last rate_period of each rate-limited queue ('''') and concurrency key; written by claims.';

DROP INDEX pgsched.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON pgsched.jobs (queue, dispatch_group, dispatch_rank, dispatch_at, id)
    WHERE state = 'available';
CREATE INDEX jobs_running_queue_idx ON pgsched.jobs (queue, concurrency_key)
    WHERE state = 'running';
CREATE INDEX jobs_labelled_idx ON pgsched.jobs (queue, labels)
    WHERE state = 'available' AND labels <> '{}';


-- functions/_finish.sql
-- _finish
-- contract: records a job that was just deleted from pgsched.jobs (by the
-- caller's own fenced DELETE, in the same transaction) as finished: a
-- history row in p_state, the audit events of a job that did not complete
-- (the claim of the attempt it was running, if any, then p_state; a
-- completion is read from the history row), the idempotency key's
-- retention clock started (a service's key is freed at once), and the
-- status event on pgsched_events (when
-- pgsched.config.events is on; payload in docs/events.md, the same as
-- complete()'s); a waiting job's dependency rows dropped, and a dead or
-- cancelled job's dependents cancelled or left waiting by their policy
-- (_fail_dependents). Callers do the check-and-write; this only files.
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
         leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule,
         service, claimed_at, concurrency_key)
    VALUES (p_job.id, p_job.shard, p_state, p_job.queue, p_job.task, p_job.args, p_job.priority,
            p_job.run_at, p_job.attempt, p_job.max_attempts, p_job.lease_token, p_job.leased_by,
            p_job.idempotency_key, p_job.labels, p_job.tenant, p_job.created_at,
            -- a worker that never called start() (SQL only): the claim is the start;
            -- a job cancelled before its handler started has none
            coalesce(p_job.started_at,
                     CASE WHEN p_job.state = 'running' AND p_state <> 'cancelled' THEN p_job.claimed_at END),
            p_now, p_result, p_error, p_job.schedule, p_job.service, p_job.claimed_at, p_job.concurrency_key);
    IF v_config.events THEN
        PERFORM pg_catalog.pg_notify('pgsched_events', pg_catalog.json_build_object(
            'id', p_job.id, 'queue', p_job.queue, 'task', p_job.task, 'state', p_state,
            'attempt', p_job.attempt)::text);
    END IF;
    IF v_config.audit AND p_state <> 'completed' THEN
        IF p_job.state = 'running' AND p_job.claimed_at IS NOT NULL THEN
            INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
            VALUES (p_job.id, p_job.claimed_at, 'claimed', p_job.attempt, p_job.leased_by, p_job.lease_token);
        END IF;
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        VALUES (p_job.id, p_now, p_state::text, p_job.attempt, p_job.leased_by, p_job.lease_token,
                coalesce(p_detail, CASE WHEN p_error IS NULL THEN NULL ELSE pg_catalog.jsonb_build_object('error', p_error) END));
    END IF;
    -- Dependencies (docs/dependencies.md): a waiting job takes its own rows
    -- with it; a dead or cancelled one applies its dependents' policy.
    IF p_job.state = 'waiting' THEN
        DELETE FROM pgsched.job_dependencies d WHERE d.job = p_job.id;
    END IF;
    IF p_state <> 'completed'
       AND EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = p_job.id AND d.on_failure = 'cancel') THEN
        PERFORM pgsched._fail_dependents(p_job.id, p_state, p_now);
    END IF;
    IF p_job.idempotency_key IS NOT NULL THEN
        UPDATE pgsched.idempotency_keys k
        -- A service's key is free again once it ended: the next enqueue starts it anew.
        SET expires_at = CASE WHEN p_job.service THEN p_now ELSE p_now + v_config.idempotency_retention END
        WHERE k.key = p_job.idempotency_key AND k.job_id = p_job.id;
    END IF;
END
$$;


-- functions/_key_room.sql
-- _key_room
-- contract: how many more jobs of concurrency key p_key queue p_q may start
-- now under its per-key limits (key_concurrency: leases not expired;
-- key_rate: starts within rate_period), counting p_taken, the room left by
-- the claim in progress (a JSON object key -> room) when it already looked.
-- Called by _claim_limited under the queue's lock.
CREATE OR REPLACE FUNCTION pgsched._key_room(p_q pgsched.queues, p_key text, p_now timestamptz, p_taken jsonb)
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_room integer := 2147483647;
BEGIN
    IF p_taken ? p_key THEN
        RETURN (p_taken ->> p_key)::integer;
    END IF;
    IF p_q.key_concurrency IS NOT NULL THEN
        v_room := p_q.key_concurrency - (
            SELECT pg_catalog.count(*) FROM pgsched.jobs j
            WHERE j.state = 'running' AND j.queue = p_q.name AND j.concurrency_key = p_key
              AND j.lease_expires_at > p_now)::integer;
    END IF;
    IF p_q.key_rate IS NOT NULL THEN
        v_room := least(v_room, p_q.key_rate - coalesce((
            SELECT pg_catalog.count(*) FROM pgsched.rate_windows w, unnest(w.starts) s
            WHERE w.queue = p_q.name AND w.rate_key = p_key AND s > p_now - p_q.rate_period), 0)::integer);
    END IF;
    RETURN v_room;
END
$$;


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
-- Per-key limits skip jobs whose key is full, reading at most 1000
-- candidates.
CREATE OR REPLACE FUNCTION pgsched._claim_limited(
    p_worker text,
    p_queue  text,
    p_n      integer,
    p_lease  interval,
    p_labels text[],
    p_scope  text,
    p_now    timestamptz,
    p_audit  boolean
)
RETURNS TABLE (
    id bigint, shard smallint, queue text, task text, args jsonb, attempt integer,
    max_attempts integer, lease_token bigint, idempotency_key text, run_at timestamptz,
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz
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
        FOR v_cand IN
            SELECT j.id, j.shard, j.concurrency_key
            FROM pgsched.jobs j
            WHERE j.state = 'available' AND j.queue = p_queue
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
        ), audit AS (
            INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
            SELECT l.id, p_now, 'claimed', l.attempt, p_worker, l.lease_token
            FROM leased l
            WHERE p_audit
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
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at
        FROM leased l;
    END LOOP;
END
$$;


-- functions/_put_back.sql
-- _put_back
-- contract: returns a running job to the queue under its fencing token
-- without spending its failure budget: max_attempts grows by one, so the
-- attempt counter keeps growing (every run has a new attempt and token) while
-- the job keeps as many failures as it had. A job whose cancellation was
-- requested is cancelled instead. Returns the new state, or 'lease_lost'.
--
-- Hand-backs are bounded: a started run handed back by a worker shutting
-- down (p_kind 'released') counts in `handbacks`; the one past
-- pgsched.config.max_handbacks (default 3) makes the job 'dead' with that
-- reason, so a job that hangs every worker cannot hold a slot across deploys
-- forever. A job released before its handler started counts nothing, and
-- neither does a service job (jobs.service): it runs until cancelled, so
-- every deploy hands it back.
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
    v_max_handbacks integer;
    v_error text;
    v_worker text;
BEGIN
    SELECT c.max_handbacks INTO v_max_handbacks FROM pgsched.config c;
    -- The holder of this token (the claim recorded below): a token is leased once.
    SELECT j.leased_by INTO v_worker FROM pgsched.jobs j WHERE j.id = p_job_id AND j.lease_token = p_token;
    DELETE FROM pgsched.jobs j
    WHERE p_kind = 'released'
      AND j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NULL AND j.started_at IS NOT NULL
      AND j.handbacks >= v_max_handbacks AND NOT j.service
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        v_error := pg_catalog.format('handed back unfinished at shutdown %s times (max_handbacks %s)',
                                     v_job.handbacks + 1, v_max_handbacks);
        PERFORM pgsched._finish(v_job, 'dead', p_now, v_error, NULL,
            pg_catalog.jsonb_build_object('error', v_error, 'reason', 'handbacks', 'handbacks', v_job.handbacks + 1));
        RETURN 'dead';
    END IF;

    UPDATE pgsched.jobs j
    SET run_at = v_run_at,
        state = CASE WHEN v_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        -- saturates at the enqueue bound (jobs_max_attempts_range): never overflows
        max_attempts = j.max_attempts + (j.max_attempts < 1000000)::integer,
        handbacks = j.handbacks + (p_kind = 'released' AND j.started_at IS NOT NULL AND NOT j.service)::integer,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        -- the attempt did not complete: its claim is recorded now (job_timeline)
        PERFORM pgsched._event(p_job_id, v_job.claimed_at, 'claimed', v_job.attempt, v_worker, p_token)
        WHERE v_job.claimed_at IS NOT NULL;
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
                                                              claim.labels, v_scope, v_now, v_audit);
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


-- functions/complete.sql
-- complete
-- contract: finishes the jobs whose fencing token is still current, in one
-- statement: each accepted job leaves pgsched.jobs and enters
-- pgsched.job_history as 'completed' with its result (its claim and
-- completion are read from that row: pgsched.job_timeline; no audit event).
-- A stale token (the lease expired and the job was handed to someone else, or
-- it already finished) changes nothing. Returns one row per input job saying
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
             leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule,
             service, claimed_at, concurrency_key)
        SELECT d.id, d.shard, 'completed', d.queue, d.task, d.args, d.priority, d.run_at, d.attempt,
               d.max_attempts, d.lease_token, d.leased_by, d.idempotency_key, d.labels, d.tenant,
               -- a worker that never called start() ran it from its claim on
               d.created_at, coalesce(d.started_at, d.claimed_at), v_now, d.result, NULL, d.schedule, d.service,
               d.claimed_at, d.concurrency_key
        FROM done d
    ), keys AS (
        UPDATE pgsched.idempotency_keys k
        SET expires_at = CASE WHEN d.service THEN v_now ELSE v_now + v_config.idempotency_retention END
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
    -- Dependents of what completed become due in this transaction; without
    -- any, one index probe. A statement of its own (see _release_dependents).
    IF EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = ANY (complete.job_ids)) THEN
        PERFORM pgsched._release_dependents(complete.job_ids, v_now);
    END IF;
END
$$;


-- functions/configure_queue.sql
-- configure_queue
-- contract: sets the dispatch policy of queue `name` (docs/dispatch.md) and
-- returns it. Every setting defaults to NULL = left as it is; p_clear names
-- the settings to remove ('concurrency', 'key_concurrency', 'rate',
-- 'key_rate', 'aging', 'labels', or 'all'; tenant_fairness is turned off with
-- false). concurrency: at most N jobs of the queue leased at once across
-- workers (key_concurrency: per concurrency_key); rate / rate_period: at most
-- N starts per period (key_rate: per key, same period); aging: one priority
-- step per interval waited (NULL: strict priority); tenant_fairness: claims
-- take turns between tenants; labels: default labels of the queue's jobs.
-- Returns the settings as JSON (durations in seconds) with `restamped`.
-- A bad value raises invalid_parameter_value and changes nothing.
--
-- Aging and fairness order the claim index, stamped when a job is written
-- (tg_jobs__dispatch): changing either re-stamps the queue's waiting jobs
-- once, here (`restamped` says how many), so claims never sort the backlog.
-- Admin only; refused for a session confined to a tenant.
CREATE OR REPLACE FUNCTION pgsched.configure_queue(
    name            text,
    concurrency     integer  DEFAULT NULL,
    rate            integer  DEFAULT NULL,
    rate_period     interval DEFAULT NULL,
    aging           interval DEFAULT NULL,
    tenant_fairness boolean  DEFAULT NULL,
    key_concurrency integer  DEFAULT NULL,
    key_rate        integer  DEFAULT NULL,
    labels          text[]   DEFAULT NULL,
    p_clear         text[]   DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_clear text[] := coalesce(p_clear, '{}');
    v_old pgsched.queues;
    v_new pgsched.queues;
    v_bad text;
    v_restamped bigint := 0;
BEGIN
    PERFORM pgsched._check_unconfined('configure a queue (queues are shared by every tenant)');
    SELECT c INTO v_bad FROM unnest(v_clear) c
    WHERE c IS NULL OR c NOT IN ('concurrency', 'key_concurrency', 'rate', 'key_rate', 'aging', 'labels', 'all');
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: cannot clear %: p_clear takes concurrency, key_concurrency, rate, key_rate, aging, labels or all',
            coalesce(pgsched._shown(v_bad), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.name IS NULL OR configure_queue.name !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$' THEN
        RAISE EXCEPTION 'pgsched: % is not a valid queue name', coalesce(pgsched._shown(configure_queue.name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.concurrency < 1 OR configure_queue.key_concurrency < 1
       OR configure_queue.concurrency > 1000000 OR configure_queue.key_concurrency > 1000000 THEN
        RAISE EXCEPTION 'pgsched: a concurrency limit is between 1 and 1000000 (clear it with p_clear)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.rate < 1 OR configure_queue.key_rate < 1
       OR configure_queue.rate > 10000 OR configure_queue.key_rate > 10000 THEN
        RAISE EXCEPTION 'pgsched: a rate is between 1 and 10000 starts per period (clear it with p_clear)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.rate_period < interval '1 millisecond' OR configure_queue.rate_period > interval '1 day' THEN
        RAISE EXCEPTION 'pgsched: rate_period % is not between 1 millisecond and 1 day', configure_queue.rate_period
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.aging < interval '1 millisecond' OR configure_queue.aging > interval '1 day' THEN
        RAISE EXCEPTION 'pgsched: aging % is not between 1 millisecond and 1 day (clear it for strict priority)',
            configure_queue.aging USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.labels IS NOT NULL THEN
        PERFORM pgsched._check_labels(configure_queue.labels);
    END IF;

    INSERT INTO pgsched.queues AS q (name) VALUES (configure_queue.name) ON CONFLICT ON CONSTRAINT queues_pkey DO NOTHING;
    SELECT * INTO v_old FROM pgsched.queues q WHERE q.name = configure_queue.name FOR UPDATE;
    v_new := v_old;
    IF 'all' = ANY (v_clear) THEN
        v_clear := ARRAY['concurrency', 'key_concurrency', 'rate', 'key_rate', 'aging', 'labels'];
        v_new.tenant_fairness := false;
    END IF;
    v_new.concurrency := CASE WHEN 'concurrency' = ANY (v_clear) THEN NULL
                              ELSE coalesce(configure_queue.concurrency, v_old.concurrency) END;
    v_new.key_concurrency := CASE WHEN 'key_concurrency' = ANY (v_clear) THEN NULL
                                  ELSE coalesce(configure_queue.key_concurrency, v_old.key_concurrency) END;
    v_new.rate := CASE WHEN 'rate' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.rate, v_old.rate) END;
    v_new.key_rate := CASE WHEN 'key_rate' = ANY (v_clear) THEN NULL
                           ELSE coalesce(configure_queue.key_rate, v_old.key_rate) END;
    v_new.rate_period := CASE WHEN v_new.rate IS NULL AND v_new.key_rate IS NULL THEN NULL
                              ELSE coalesce(configure_queue.rate_period, v_old.rate_period) END;
    v_new.aging := CASE WHEN 'aging' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.aging, v_old.aging) END;
    v_new.tenant_fairness := coalesce(configure_queue.tenant_fairness, v_new.tenant_fairness);
    v_new.labels := CASE WHEN 'labels' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.labels, v_old.labels) END;
    IF configure_queue.rate_period IS NOT NULL AND v_new.rate IS NULL AND v_new.key_rate IS NULL THEN
        RAISE EXCEPTION 'pgsched: rate_period without a rate or key_rate' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (v_new.rate IS NOT NULL OR v_new.key_rate IS NOT NULL) AND v_new.rate_period IS NULL THEN
        RAISE EXCEPTION 'pgsched: a rate needs rate_period (N starts per period)' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    UPDATE pgsched.queues q
    SET concurrency = v_new.concurrency, key_concurrency = v_new.key_concurrency, rate = v_new.rate,
        key_rate = v_new.key_rate, rate_period = v_new.rate_period, aging = v_new.aging,
        tenant_fairness = v_new.tenant_fairness, labels = v_new.labels, updated_at = pg_catalog.now()
    WHERE q.name = configure_queue.name;
    IF v_new.rate IS NULL AND v_new.key_rate IS NULL THEN
        DELETE FROM pgsched.rate_windows w WHERE w.queue = configure_queue.name;
    ELSIF v_new.key_rate IS NULL THEN
        DELETE FROM pgsched.rate_windows w WHERE w.queue = configure_queue.name AND w.rate_key <> '';
    END IF;

    IF (v_new.aging, v_new.tenant_fairness) IS DISTINCT FROM (v_old.aging, v_old.tenant_fairness) THEN
        -- Setting queue to itself fires tg_jobs__dispatch (UPDATE OF queue).
        -- Leased jobs are left to their workers; they are stamped again when
        -- they come back with a new run_at.
        UPDATE pgsched.jobs j SET queue = j.queue
        WHERE j.queue = configure_queue.name AND j.state <> 'running';
        GET DIAGNOSTICS v_restamped = ROW_COUNT;
    END IF;

    RETURN pg_catalog.jsonb_build_object(
        'queue', configure_queue.name, 'concurrency', v_new.concurrency, 'key_concurrency', v_new.key_concurrency,
        'rate', v_new.rate, 'key_rate', v_new.key_rate,
        'rate_period_s', EXTRACT(epoch FROM v_new.rate_period),
        'aging_s', EXTRACT(epoch FROM v_new.aging), 'tenant_fairness', v_new.tenant_fairness,
        'labels', v_new.labels, 'restamped', v_restamped);
END
$$;


-- functions/enqueue.sql
-- enqueue
-- contract: adds one job and returns its id. For an idempotency key already
-- held by an active job, or by a finished one within the retention window,
-- returns that job's id and adds nothing (keys are per tenant), provided the
-- task and args are the same (else PS422, see _key_holder). The shard derives from the key when
-- there is one (so a key always lands on the same shard), else it is random.
-- A refused value raises with its column named (see _check_job). timeout:
-- the time limit of each run (NULL: the task's, else none), see start().
-- With depends_on (job ids), the job waits (state 'waiting') until every
-- dependency completed; on_dependency_failure ('cancel' or 'wait') says what
-- a dependency ending dead or cancelled does to it (see _depend).
-- trace_context: the caller's trace propagation headers (see docs/otel.md).
-- concurrency_key (e.g. 'customer:42') is what the queue's per-key limits
-- count (docs/dispatch.md).
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
    tenant          text        DEFAULT NULL,
    timeout         interval    DEFAULT NULL,
    depends_on      bigint[]    DEFAULT NULL,
    on_dependency_failure text  DEFAULT 'cancel',
    trace_context   jsonb       DEFAULT NULL,
    concurrency_key text        DEFAULT NULL
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
    v_waits boolean := coalesce(pg_catalog.cardinality(enqueue.depends_on), 0) > 0;
BEGIN
    PERFORM pgsched._check_tenant(enqueue.tenant);
    PERFORM pgsched._check_command_task(enqueue.task, 'enqueue()');
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    PERFORM pgsched._check_job(enqueue.task, v_queue, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0),
                               v_run_at, v_max, enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant);
    PERFORM pgsched._check_payload(enqueue.args, v_limit);
    IF enqueue.timeout <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: timeout % is not allowed: it must be positive (NULL means none)', enqueue.timeout
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_timeout_positive', COLUMN = 'timeout',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
    IF enqueue.on_dependency_failure IS NOT NULL AND enqueue.on_dependency_failure NOT IN ('cancel', 'wait') THEN
        PERFORM pgsched._depend('{}', '{}', '{}', ARRAY[enqueue.on_dependency_failure], v_now, false);
    END IF;
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
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant,
         timeout, trace_context, concurrency_key)
    VALUES (v_id, v_shard,
            CASE WHEN v_waits THEN 'waiting' WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, enqueue.task, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0), v_run_at, 0, v_max,
            enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant, enqueue.timeout,
            enqueue.trace_context, enqueue.concurrency_key);
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

    IF v_waits THEN
        IF pg_catalog.array_position(enqueue.depends_on, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: depends_on % holds a NULL', enqueue.depends_on
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on';
        END IF;
        PERFORM pgsched._depend(ARRAY[v_id], ARRAY[v_shard], ARRAY[pg_catalog.to_jsonb(enqueue.depends_on)],
                                ARRAY[enqueue.on_dependency_failure], v_now, false);
    ELSIF v_run_at <= v_now THEN
        PERFORM pg_catalog.pg_notify('pgsched_jobs', v_queue);
    ELSE
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN v_id;
END
$$;


-- functions/expire_leases.sql
-- expire_leases
-- contract: jobs whose lease ran out (their worker died, hung or lost its
-- connection) go back to 'available' at once, keeping their run_at (so they
-- come before newer work, and their start lag shows the time lost), or to 'dead' when their
-- attempts are used up, or to 'cancelled' when cancellation was requested,
-- each with a 'lease_expired' event naming the worker and token that lost
-- the lease. A service job (jobs.service) always goes back to 'available',
-- its attempt given back, so expiries never send it dead. Candidates are locked with SKIP LOCKED and every write re-checks
-- the token, the state and the expiry, so a completion racing the expiry
-- wins cleanly and a stale read never overwrites a newer claim. Returns the
-- number of jobs handled (at most p_limit; call again while it is p_limit).
-- Runs past their deadline (deadline_at + config.timeout_grace) are failed
-- too, even while their heartbeats continue (see _fail_overdue).
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
            -- A service's lost lease does not use up an attempt: it is restarted, never sent dead.
            max_attempts = CASE WHEN j.service THEN least(j.max_attempts::bigint + 1, 1000000)::integer
                                ELSE j.max_attempts END,
            last_error = pg_catalog.format('lease expired at %s (worker %s)', e.lease_expires_at, e.leased_by)
        FROM expired e
        WHERE j.id = e.id AND j.shard = e.shard AND j.lease_token = e.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
          AND (j.attempt < j.max_attempts OR j.service) AND j.cancel_requested_at IS NULL
        RETURNING j.id, j.queue, j.attempt, e.leased_by, e.lease_token, e.lease_expires_at, j.claimed_at
    ), audit AS (
        -- the attempt's claim (not recorded while it ran: job_timeline), then its expiry
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        SELECT r.id, ev.at, ev.kind, r.attempt, r.leased_by, r.lease_token, ev.detail
        FROM requeued r
        CROSS JOIN pgsched.config c
        CROSS JOIN LATERAL (VALUES
            (1, r.claimed_at, 'claimed', NULL::jsonb),
            (2, v_now, 'lease_expired',
             pg_catalog.jsonb_build_object('lease_expires_at', r.lease_expires_at, 'outcome', 'available'))
        ) AS ev(step, at, kind, detail)
        WHERE c.audit AND ev.at IS NOT NULL
        ORDER BY r.id, ev.step
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
          AND ((j.attempt >= j.max_attempts AND NOT j.service) OR j.cancel_requested_at IS NOT NULL)
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

    RETURN v_count + v_finished + pgsched._fail_overdue(p_now, p_limit, p_shard);
END
$$;


-- functions/fail.sql
-- fail
-- contract: reports a failed run under its fencing token and returns the
-- job's resulting state: 'scheduled' or 'available' (a retry, at retry_at or
-- after the task/queue backoff), 'dead' (attempts exhausted, or final), or
-- 'cancelled' (cancellation had been requested). A stale token changes
-- nothing and returns 'lease_lost'. A result (a command's exit code and
-- output) is kept with the failed attempt's event, and in the history row
-- when the job ends here.
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
    p_now    timestamptz DEFAULT NULL,
    result   jsonb       DEFAULT NULL
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
    RETURNING j.state, j.attempt, j.queue, j.run_at, v.leased_by, j.claimed_at
    INTO v_state, v_job.attempt, v_job.queue, v_job.run_at, v_job.leased_by, v_job.claimed_at;
    IF FOUND THEN
        -- the attempt did not complete: its claim is recorded now (job_timeline)
        PERFORM pgsched._event(fail.job_id, v_job.claimed_at, 'claimed', v_job.attempt, v_job.leased_by, fail.token)
        WHERE v_job.claimed_at IS NOT NULL;
        PERFORM pgsched._event(fail.job_id, v_now, 'failed', v_job.attempt, v_job.leased_by, fail.token,
            pg_catalog.jsonb_build_object('error', fail.error, 'retry_at', v_job.run_at)
            || CASE WHEN fail.result IS NULL THEN '{}' ELSE pg_catalog.jsonb_build_object('result', fail.result) END);
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
        PERFORM pgsched._finish(v_job, v_state, v_now, fail.error, fail.result);
        RETURN v_state::text;
    END IF;
    RETURN 'lease_lost';
END
$$;


-- functions/next_start.sql
-- next_start
-- contract: when every one of `queues` (paused ones aside) is at its rate
-- limit, the moment the first of them may start a job again (its oldest
-- start in the window plus rate_period); NULL as soon as one of them has no
-- rate limit or room under it. A worker whose claim came back short sleeps
-- until then instead of claiming again in vain (per-key rates are not
-- counted: other keys may still start).
CREATE OR REPLACE FUNCTION pgsched.next_start(queues text[], p_now timestamptz DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_next timestamptz;
    v_open boolean;
BEGIN
    SELECT pg_catalog.bool_or(f.next IS NULL), pg_catalog.min(f.next) INTO v_open, v_next
    FROM unnest(next_start.queues) u(name)
    LEFT JOIN pgsched.queues q ON q.name = u.name
    CROSS JOIN LATERAL (
        SELECT CASE WHEN q.rate IS NULL OR pg_catalog.cardinality(s.kept) < q.rate THEN NULL
                    ELSE s.kept[1] + q.rate_period END AS next
        FROM (SELECT ARRAY(SELECT t FROM pgsched.rate_windows w, unnest(w.starts) t
                           WHERE w.queue = q.name AND w.rate_key = '' AND t > v_now - q.rate_period
                           ORDER BY t) AS kept) s
    ) f
    WHERE q.paused IS NOT TRUE;
    IF v_open IS NOT FALSE THEN
        RETURN NULL;
    END IF;
    RETURN v_next;
END
$$;


-- functions/register_tasks.sql
-- register_tasks
-- contract: upserts task policies from a JSON array of objects with keys
-- name (required), queue, max_attempts, backoff_base, backoff_max,
-- backoff_jitter, timeout (seconds), labels (default labels of the task's jobs). Workers call it at start with the
-- tasks they
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
    INSERT INTO pgsched.tasks AS t
        (name, queue, max_attempts, backoff_base, backoff_max, backoff_jitter, updated_at, timeout, labels)
    SELECT e->>'name', coalesce(e->>'queue', 'default'), (e->>'max_attempts')::integer,
           pg_catalog.make_interval(secs => (e->>'backoff_base')::double precision),
           pg_catalog.make_interval(secs => (e->>'backoff_max')::double precision),
           (e->>'backoff_jitter')::real, pg_catalog.now(),
           pg_catalog.make_interval(secs => (e->>'timeout')::double precision),
           CASE WHEN pg_catalog.jsonb_typeof(e->'labels') = 'array' AND e->'labels' <> '[]'
                THEN ARRAY(SELECT pg_catalog.jsonb_array_elements_text(e->'labels')) END
    FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
    ON CONFLICT (name) DO UPDATE
    SET queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts, backoff_base = EXCLUDED.backoff_base,
        backoff_max = EXCLUDED.backoff_max, backoff_jitter = EXCLUDED.backoff_jitter, updated_at = EXCLUDED.updated_at,
        timeout = EXCLUDED.timeout, labels = EXCLUDED.labels
    -- A session confined to a tenant adds tasks but never changes the policy
    -- of a task every tenant shares.
    WHERE pgsched._tenant_scope() IS NULL
      AND (t.queue, t.max_attempts, t.backoff_base, t.backoff_max, t.backoff_jitter, t.timeout, t.labels)
          IS DISTINCT FROM (EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.backoff_base,
                            EXCLUDED.backoff_max, EXCLUDED.backoff_jitter, EXCLUDED.timeout, EXCLUDED.labels);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;


-- functions/retry.sql
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
        (id, shard, queue, task, args, priority, run_at, idempotency_key, labels, tenant, created_at, service,
         concurrency_key)
    VALUES (v_last.id, v_last.shard, v_last.queue, v_last.task, v_last.args, v_last.priority, v_now,
            v_last.idempotency_key, v_last.labels, v_last.tenant, v_last.created_at, v_last.service,
            v_last.concurrency_key)
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


-- functions/tg_jobs__dispatch.sql
-- tg_jobs__dispatch
-- contract: stamps a job's place in the claim order from its queue's policy
-- whenever the row is written or its run_at, priority, queue or tenant
-- changes (never by a sweep of waiting rows): dispatch_at = run_at under
-- strict priority (dispatch_rank = -priority), or run_at - priority x aging
-- under aging (dispatch_rank = 0), so a job due at run_at with priority p
-- passes a job of priority q due (q - p) x aging later: one priority step per
-- aging interval waited, fixed once, read by one index scan. Under tenant
-- fairness dispatch_group is the tenant, so claims can take turns between
-- tenants (see _claim_limited). A new job without labels gets its task's
-- default labels, else its queue's (worker pools, docs/dispatch.md).
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__dispatch()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_aging interval;
    v_fair boolean;
    v_labels text[];
    v_task_labels text[];
BEGIN
    SELECT q.aging, q.tenant_fairness, q.labels INTO v_aging, v_fair, v_labels
    FROM pgsched.queues q WHERE q.name = NEW.queue;
    IF TG_OP = 'INSERT' AND NEW.labels = '{}' THEN
        SELECT t.labels INTO v_task_labels FROM pgsched.tasks t WHERE t.name = NEW.task;
        NEW.labels := coalesce(v_task_labels, v_labels, '{}');
    END IF;
    NEW.dispatch_group := CASE WHEN v_fair THEN coalesce(NEW.tenant, '') ELSE '' END;
    IF v_aging IS NULL THEN
        NEW.dispatch_rank := -NEW.priority;
        NEW.dispatch_at := NEW.run_at;
    ELSE
        -- |priority| <= 1e6 and aging <= 1 day: at most 2738 years either way.
        NEW.dispatch_rank := 0;
        NEW.dispatch_at := NEW.run_at - NEW.priority * v_aging;
    END IF;
    RETURN NEW;
END
$$;


-- 30_triggers.sql
-- pgsched: triggers. CREATE OR REPLACE, so a migration can apply this file whole.
--
-- Every row entering pgsched.jobs passes tg_jobs__before_insert, except rows
-- written by enqueue() and enqueue_many(), which do the same work set-based
-- and mark themselves with the transaction-local setting
-- pgsched.trusted_insert. The mark counts only for the schema's owner (those
-- functions run as the owner), so no other role can skip the trigger.
-- Writers other than the owner (plain INSERTs by applications) pass the
-- 'untrusted' trigger, which also assigns id, shard and created_at and
-- refuses a schedule link; CURRENT_USER in WHEN is the writer's role, before
-- the SECURITY DEFINER function switches to the owner.
DO $$
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__before_insert
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER <> %L)
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('untrusted')
        $sql$, current_user);
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__before_insert_owner
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER = %L
                  AND pg_catalog.current_setting('pgsched.trusted_insert', true) IS DISTINCT FROM 'on')
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('owner')
        $sql$, current_user);
END
$$;

CREATE OR REPLACE TRIGGER tg_schedules__before_write
    BEFORE INSERT OR UPDATE ON pgsched.schedules
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_schedules__before_write();

CREATE OR REPLACE TRIGGER tg_config__before_update
    BEFORE UPDATE ON pgsched.config
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_config__before_update();

-- After the insert triggers (names fire in order): the claim order of a row
-- from its queue's dispatch policy. UPDATE OF: claims, heartbeats and
-- completions, which set none of these columns, never fire it.
CREATE OR REPLACE TRIGGER tg_jobs__dispatch
    BEFORE INSERT OR UPDATE OF run_at, priority, queue, tenant ON pgsched.jobs
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_jobs__dispatch();


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
           -- compared as text: an enum value cannot be used in the transaction that adds it (a migration)
           pg_catalog.count(*) FILTER (WHERE j.state::text = 'waiting') AS waiting,
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
       coalesce(a.claimed, 0) AS claimed,
       coalesce(a.waiting, 0) AS waiting
FROM names n
LEFT JOIN active a ON a.queue = n.queue
LEFT JOIN recent r ON r.queue = n.queue
LEFT JOIN pgsched.queues q ON q.name = n.queue;
COMMENT ON VIEW pgsched.queue_stats IS
    'Per queue: depth by state (running: handler started; claimed: leased, waiting for a slot; waiting: for dependencies), oldest due job age, retries waiting, expired leases, and the last 5 minutes of finished work with start-lag percentiles (seconds).';

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

-- job_timeline: every transition of every job, in order: those recorded in
-- job_events (failures, retries, snoozes, expiries, cancels, hand-backs, and
-- the claim of every attempt that did not complete) and those derived from
-- the job's own row: the claim of the attempt running now (jobs.claimed_at)
-- and the claim and completion of a completed job's last attempt
-- (job_history.claimed_at, finished_at). source says which; seq is the
-- event's for a recorded one. Rows filed before job_history had claimed_at
-- kept recorded claimed/completed events and are not derived again.
-- security_invoker: the reader's row-level security applies, as on the
-- tables (a tenant-bound session sees its own jobs' derived transitions;
-- events carry no tenant, so it sees no recorded ones).
CREATE OR REPLACE VIEW pgsched.job_timeline WITH (security_invoker = true) AS
SELECT t.job_id, t.at, t.kind, t.attempt, t.worker, t.token, t.detail, t.source, t.seq
FROM (
    SELECT e.job_id, e.at, e.kind, e.attempt, e.worker, e.token, e.detail, 'recorded'::text AS source, e.seq,
           CASE e.kind WHEN 'claimed' THEN 0 ELSE 1 END AS step
    FROM pgsched.job_events e
    UNION ALL
    SELECT j.id, j.claimed_at, 'claimed', j.attempt, j.leased_by, j.lease_token, NULL, 'derived', NULL, 0
    FROM pgsched.jobs j
    WHERE j.state = 'running' AND j.claimed_at IS NOT NULL
      -- a claim recorded before events became exceptions
      AND NOT EXISTS (SELECT 1 FROM pgsched.job_events e
                      WHERE e.job_id = j.id AND e.kind = 'claimed' AND e.token = j.lease_token)
    UNION ALL
    SELECT h.id, d.at, d.kind, h.attempt, h.leased_by, h.lease_token, NULL, 'derived', NULL, d.step
    FROM pgsched.job_history h
    CROSS JOIN LATERAL (VALUES (h.claimed_at, 'claimed', 0), (h.finished_at, 'completed', 2)) AS d(at, kind, step)
    WHERE h.state = 'completed' AND h.claimed_at IS NOT NULL
) t
ORDER BY t.job_id, t.at, t.attempt, t.step, t.seq;
COMMENT ON VIEW pgsched.job_timeline IS
    'Every transition of a job in order: recorded (job_events: the exceptions) and derived (jobs/job_history: the claim of a running attempt, the claim and completion of a completed job). Obeys the reader''s row-level security.';

-- Privileges as a fresh install gives them.
REVOKE EXECUTE ON FUNCTION pgsched.enqueue, pgsched.configure_queue, pgsched.next_start, pgsched._claim_limited,
    pgsched._key_room, pgsched.tg_jobs__dispatch FROM PUBLIC;
REVOKE ALL ON pgsched.rate_windows FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.enqueue TO pgsched_enqueue;
GRANT INSERT (concurrency_key) ON pgsched.jobs TO pgsched_enqueue;
GRANT EXECUTE ON FUNCTION pgsched.next_start TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.configure_queue TO pgsched_admin;
GRANT SELECT ON pgsched.job_timeline TO pgsched_worker;
-- 40_views.sql is re-created whole (CREATE OR REPLACE VIEW resets the views' options): run as the caller again.
ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);
ALTER VIEW pgsched.queue_history SET (security_invoker = true);
