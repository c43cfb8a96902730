-- _key_holder
-- contract: the id of the job holding idempotency key p_key (NULL when none
-- does). A repeated key must repeat the work: when the holder (active, or
-- finished within the retention) has another task or other args than
-- p_task/p_args, raises SQLSTATE PS422 naming the key and the holder instead
-- of handing back another job's id. Options (queue, run_at, priority...) are
-- not compared: the first enqueue's stand. p_row, 1-based, numbers the row in
-- a batch. Keys are per tenant: p_tenant (NULL: no tenant) names the space. Each statement here takes a new snapshot, so it sees a concurrent
-- holder that the caller's key insert waited for.
CREATE OR REPLACE FUNCTION pgsched._key_holder(
    p_key text, p_task text, p_args jsonb, p_row bigint DEFAULT NULL, p_tenant text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_shard smallint;
    v_task text;
    v_args jsonb;
BEGIN
    SELECT k.job_id, k.shard INTO v_id, v_shard FROM pgsched.idempotency_keys k
    WHERE k.key = p_key AND k.tenant IS NOT DISTINCT FROM p_tenant;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT j.task, j.args INTO v_task, v_args FROM pgsched.jobs j WHERE j.id = v_id AND j.shard = v_shard;
    IF NOT FOUND THEN
        SELECT h.task, h.args INTO v_task, v_args FROM pgsched.job_history h WHERE h.id = v_id LIMIT 1;
    END IF;
    IF FOUND AND (v_task, v_args) IS DISTINCT FROM (p_task, coalesce(p_args, '{}')) THEN
        RAISE EXCEPTION '%idempotency_key % is held by job % with %',
                CASE WHEN p_row IS NULL THEN 'pgsched: ' ELSE pg_catalog.format('pgsched: row %s of the batch: ', p_row) END,
                pgsched._shown(p_key), v_id,
                CASE WHEN v_task IS DISTINCT FROM p_task
                     THEN pg_catalog.format('task %s, not %s', pgsched._shown(v_task), pgsched._shown(p_task))
                     ELSE pg_catalog.format('other args (%s, not %s)', pgsched._shown(v_args::text),
                                            pgsched._shown(coalesce(p_args, '{}')::text)) END
            USING ERRCODE = 'PS422', COLUMN = 'idempotency_key', SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'A repeated key returns the existing job only for the same task and args: use another key for other work.';
    END IF;
    RETURN v_id;
END
$$;
