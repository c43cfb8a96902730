-- enqueue
-- contract: adds one job and returns its id. For an idempotency key already
-- held by an active job, or by a finished one within the retention window,
-- returns that job's id and adds nothing. The shard derives from the key when
-- there is one (so a key always lands on the same shard), else it is random.
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
    v_id bigint;
BEGIN
    PERFORM pgsched._check_tenant(enqueue.tenant);
    INSERT INTO pgsched.jobs AS j
        (shard, queue, task, args, priority, run_at, idempotency_key, max_attempts, labels, tenant)
    VALUES (
        coalesce(pgsched._shard_for_key(enqueue.idempotency_key), pgsched._random_shard()),
        coalesce(enqueue.queue, 'default'), enqueue.task, coalesce(enqueue.args, '{}'),
        coalesce(enqueue.priority, 0), coalesce(enqueue.run_at, pg_catalog.now()),
        enqueue.idempotency_key, enqueue.max_attempts, coalesce(enqueue.labels, '{}'), enqueue.tenant)
    RETURNING j.id INTO v_id;

    IF v_id IS NULL THEN
        -- The trigger found the key taken: hand back the job that holds it.
        SELECT k.job_id INTO v_id FROM pgsched.idempotency_keys k WHERE k.key = enqueue.idempotency_key;
    END IF;
    RETURN v_id;
END
$$;
