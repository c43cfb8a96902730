-- _replace
-- contract: enqueue(on_conflict => 'replace') for a key already held: the
-- job holding key p_key (tenant p_tenant), while it has not started
-- (scheduled, available or waiting), takes p_args, p_run_at and p_priority
-- (a debounce: each event moves the run) and keeps its id, shard, attempts,
-- lease token history and key; a waiting job keeps waiting for its
-- dependencies. Returns its id. One UPDATE checks the state and writes, so a
-- claim that took the row first wins: the UPDATE waits for the claim's row
-- lock, then sees the job running and changes nothing. Refused with SQLSTATE
-- PS423, naming the job and its state, once it started (running) or ended
-- (its key held for the retention); with PS422 when it is another task.
-- The caller (enqueue) holds the key row's lock, so two replaces of one key
-- take turns. The claim order is stamped again by tg_jobs__redispatch.
CREATE OR REPLACE FUNCTION pgsched._replace(
    p_key      text,
    p_tenant   text,
    p_task     text,
    p_args     jsonb,
    p_run_at   timestamptz,
    p_priority integer,
    p_now      timestamptz
)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_shard smallint;
    v_state pgsched.job_state;
    v_queue text;
    v_task text;
BEGIN
    SELECT k.job_id, k.shard INTO v_id, v_shard FROM pgsched.idempotency_keys k
    WHERE k.key = p_key AND k.tenant IS NOT DISTINCT FROM p_tenant;
    UPDATE pgsched.jobs j
    SET args = coalesce(p_args, '{}'), run_at = p_run_at, priority = coalesce(p_priority, 0),
        state = CASE WHEN j.state = 'waiting' THEN 'waiting'
                     WHEN p_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state
    WHERE j.id = v_id AND j.shard = v_shard AND j.task = p_task
      AND j.state IN ('scheduled', 'available', 'waiting')
    RETURNING j.state, j.queue INTO v_state, v_queue;
    IF FOUND THEN
        IF v_state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_queue);
        ELSIF v_state = 'scheduled' THEN
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_id;
    END IF;

    -- Why not: the job's task and where it is now (active, else its latest outcome).
    SELECT j.task, j.state INTO v_task, v_state FROM pgsched.jobs j WHERE j.id = v_id AND j.shard = v_shard;
    IF NOT FOUND THEN
        SELECT h.task, h.state INTO v_task, v_state FROM pgsched.job_history h
        WHERE h.id = v_id ORDER BY h.finished_at DESC LIMIT 1;
    END IF;
    IF v_task IS DISTINCT FROM p_task THEN
        RAISE EXCEPTION 'pgsched: idempotency_key % is held by job % with task %, not %', pgsched._shown(p_key), v_id,
                pgsched._shown(v_task), pgsched._shown(p_task)
            USING ERRCODE = 'PS422', COLUMN = 'idempotency_key', SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'on_conflict => ''replace'' changes args, run_at and priority, never the task.';
    END IF;
    RAISE EXCEPTION 'pgsched: idempotency_key % is held by job %, which is %: a job is replaced only before it starts',
            pgsched._shown(p_key), v_id, v_state
        USING ERRCODE = 'PS423', COLUMN = 'idempotency_key', SCHEMA = 'pgsched', TABLE = 'jobs',
              HINT = CASE WHEN v_state = 'running'
                          THEN 'Enqueue with another key for another run, or keep the running one (on_conflict => ''keep'').'
                          ELSE 'The key is held for the retention after the job ended; key_scope => ''active'' frees it when the job ends.' END;
END
$$;
