-- enqueue_many
-- contract: enqueue() for many jobs in one statement; returns one id per input
-- row, in input order (for a repeated idempotency key, the holder's id; rows
-- repeating a key within the batch get the first row's job). Arrays are
-- parallel; a NULL array, or a NULL element, means the default.
CREATE OR REPLACE FUNCTION pgsched.enqueue_many(
    tasks            text[],
    args             jsonb[]       DEFAULT NULL,
    queues           text[]        DEFAULT NULL,
    run_ats          timestamptz[] DEFAULT NULL,
    priorities       integer[]     DEFAULT NULL,
    idempotency_keys text[]        DEFAULT NULL,
    max_attempts     integer[]     DEFAULT NULL,
    tenants          text[]        DEFAULT NULL
)
RETURNS TABLE (ord bigint, job_id bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_ords bigint[];
    v_ids bigint[];
    v_keys text[];
BEGIN
    IF tasks IS NULL OR pg_catalog.cardinality(tasks) = 0 THEN
        RETURN;
    END IF;
    -- Every row is checked, also those whose tenant is missing or NULL.
    PERFORM pgsched._check_tenant(x.tenant)
    FROM (SELECT DISTINCT u.tenant FROM unnest(tasks, tenants) AS u(task, tenant)) x;

    WITH numbered AS MATERIALIZED (
        -- ids are drawn while the input is read in order, so they grow in
        -- input order (a batch runs first-in, first-out)
        SELECT u.ord, u.task, u.args, u.queue, u.run_at, u.priority, u.key, u.max_attempts, u.tenant,
               pg_catalog.nextval('pgsched.jobs_id_seq') AS id
        FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants)
             WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, ord)
    ), input AS MATERIALIZED (
        SELECT n.*,
               -- only the first row of a key in this batch is inserted
               n.key IS NULL OR n.ord = pg_catalog.min(n.ord) OVER (PARTITION BY n.key) AS first_of_key
        FROM numbered n
    ), inserted AS (
        INSERT INTO pgsched.jobs AS j
            (id, shard, queue, task, args, priority, run_at, idempotency_key, max_attempts, tenant)
        SELECT i.id,
               coalesce(pgsched._shard_for_key(i.key), pgsched._random_shard()),
               coalesce(i.queue, 'default'), i.task, coalesce(i.args, '{}'),
               coalesce(i.priority, 0), coalesce(i.run_at, v_now), i.key, i.max_attempts, i.tenant
        FROM input i
        WHERE i.first_of_key
        -- Keys are taken in key order, so concurrent batches sharing keys
        -- wait for each other instead of deadlocking.
        ORDER BY i.key, i.ord
        RETURNING j.id
    )
    SELECT pg_catalog.array_agg(i.ord ORDER BY i.ord),
           pg_catalog.array_agg(ins.id ORDER BY i.ord),
           pg_catalog.array_agg(i.key ORDER BY i.ord)
    INTO v_ords, v_ids, v_keys
    FROM input i
    LEFT JOIN inserted ins ON ins.id = i.id;

    -- Rows whose key was taken: look the holder up in a new statement, whose
    -- snapshot sees a concurrent enqueue of the same key that we waited for.
    RETURN QUERY
    SELECT x.o, coalesce(x.id, (SELECT k.job_id FROM pgsched.idempotency_keys k WHERE k.key = x.k))
    FROM unnest(v_ords, v_ids, v_keys) AS x(o, id, k)
    ORDER BY x.o;
END
$$;
