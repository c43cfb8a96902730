-- 0003: status events, job handles, test mode

-- appdev: status events (NOTIFY pgsched_events) and the gap-free event stream.

-- == Tables and indexes (00_schema.sql, 10_tables.sql, 20_indexes.sql): before the functions. ==

-- pgsched.config.events turns the NOTIFY of terminal transitions on or off.
ALTER TABLE pgsched.config ADD COLUMN events boolean NOT NULL DEFAULT true;

-- The position of the event stream. Rows filed before the upgrade keep NULL
-- (the stream starts at the upgrade); adding the default afterwards rewrites
-- nothing.
ALTER TABLE pgsched.job_history ADD COLUMN finished_xid xid8;
ALTER TABLE pgsched.job_history ALTER COLUMN finished_xid SET DEFAULT pg_catalog.pg_current_xact_id();
CREATE INDEX job_history_finished_xid_idx ON pgsched.job_history (finished_xid);



-- functions/_finish.sql
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
            p_job.idempotency_key, p_job.labels, p_job.tenant, p_job.created_at, p_job.started_at,
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
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
    v_config pgsched.config;
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
        RETURNING j.*, u.result
    ), history AS (
        INSERT INTO pgsched.job_history
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
             leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule)
        SELECT d.id, d.shard, 'completed', d.queue, d.task, d.args, d.priority, d.run_at, d.attempt,
               d.max_attempts, d.lease_token, d.leased_by, d.idempotency_key, d.labels, d.tenant,
               d.created_at, d.started_at, v_now, d.result, NULL, d.schedule
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


-- functions/read_events.sql
-- read_events
-- contract: the terminal transitions (completed, dead, cancelled) filed
-- after position p_after, gap-free and each once: whole transactions, in
-- transaction-id order, and only from transactions older than every one
-- still in flight, so nothing can later appear behind a position returned.
-- position is the id of the transaction that filed the row (0 reads from
-- the oldest history kept); pass the last pos seen to continue. Returns at
-- least p_limit rows when that many are ready, never part of a transaction.
-- Runs with the caller's rights: row-level security applies.
--
-- Why not by a sequence or by finished_at: both are drawn before commit, so
-- a transaction that commits late files rows behind what a reader already
-- passed. Transaction ids below the snapshot's xmin belong to transactions
-- that have all ended, so that part of the history can no longer change.
CREATE OR REPLACE FUNCTION pgsched.read_events(
    p_after bigint  DEFAULT 0,
    p_limit integer DEFAULT 1000
)
RETURNS TABLE (pos bigint, id bigint, queue text, task text, state pgsched.job_state,
               attempt integer, finished_at timestamptz, error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_after xid8;
    v_horizon xid8 := pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
    v_cut xid8;
BEGIN
    IF p_after IS NULL OR p_after < 0 THEN
        RAISE EXCEPTION 'read_events: position must be 0 or a position it returned, not %', p_after
            USING ERRCODE = '22023';
    END IF;
    v_after := p_after::text::xid8;
    -- The transaction of the p_limit-th row: the batch ends with it, whole.
    SELECT h.finished_xid INTO v_cut
    FROM pgsched.job_history h
    WHERE h.finished_xid > v_after AND h.finished_xid < v_horizon
    ORDER BY h.finished_xid
    OFFSET greatest(coalesce(p_limit, 1000), 1) - 1
    LIMIT 1;
    RETURN QUERY
    SELECT h.finished_xid::text::bigint, h.id, h.queue, h.task, h.state, h.attempt, h.finished_at, h.error
    FROM pgsched.job_history h
    WHERE h.finished_xid > v_after AND h.finished_xid < v_horizon
      AND (v_cut IS NULL OR h.finished_xid <= v_cut)
    ORDER BY h.finished_xid, h.finished_at, h.id;
END
$$;

-- == Grants (90_grants.sql): after the functions (read_events must exist). ==

REVOKE EXECUTE ON FUNCTION pgsched.read_events FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.read_events TO pgsched_enqueue, pgsched_worker;
