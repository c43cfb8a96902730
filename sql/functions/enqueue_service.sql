-- enqueue_service
-- contract: enqueue() for a service job (jobs.service): one that runs until
-- it is cancelled, has no timeout, and is started again on another worker
-- when its worker dies (its lease expires; expiries never send it dead,
-- see expire_leases). With an idempotency key, at most one such job is
-- alive per key: a repeat while it is active returns its id and adds
-- nothing; once it ended (cancelled, dead, or returned), the key is free
-- and the next call starts a new one. Same parameters and checks as
-- enqueue(); a plain INSERT INTO pgsched.jobs (..., service) VALUES (...,
-- true) does the same without returning the holder of a repeated key
-- (and without resource limits). memory_limit (MiB) and cpu_limit (CPUs):
-- NULL takes config.service_memory_limit / service_cpu_limit, 0 means none;
-- kept in jobs.memory_limit / cpu_limit (docs/services.md).
CREATE OR REPLACE FUNCTION pgsched.enqueue_service(
    task            text,
    args            jsonb       DEFAULT '{}',
    queue           text        DEFAULT 'default',
    run_at          timestamptz DEFAULT NULL,
    priority        integer     DEFAULT 0,
    idempotency_key text        DEFAULT NULL,
    max_attempts    integer     DEFAULT NULL,
    labels          text[]      DEFAULT '{}',
    tenant          text        DEFAULT NULL,
    memory_limit    integer     DEFAULT NULL,
    cpu_limit       real        DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_run_at timestamptz := coalesce(enqueue_service.run_at, pg_catalog.now());
    v_queue text := coalesce(enqueue_service.queue, 'default');
    v_args jsonb := coalesce(enqueue_service.args, '{}');
    v_limit integer;
    v_max integer := enqueue_service.max_attempts;
    v_id bigint := pg_catalog.nextval('pgsched.jobs_id_seq');
    v_shard smallint;
    v_memory integer;
    v_cpu real;
BEGIN
    enqueue_service.tenant := coalesce(enqueue_service.tenant, nullif(pgsched._tenant_scope(), ''));
    PERFORM pgsched._check_tenant(enqueue_service.tenant);
    PERFORM pgsched._check_resource_limits(enqueue_service.memory_limit, enqueue_service.cpu_limit);
    PERFORM pgsched._check_command_task(enqueue_service.task, 'enqueue_service()');
    PERFORM pgsched._check_job(enqueue_service.task, v_queue, v_args, coalesce(enqueue_service.priority, 0), v_run_at,
                               v_max, enqueue_service.idempotency_key, coalesce(enqueue_service.labels, '{}'),
                               enqueue_service.tenant);
    SELECT c.max_payload_bytes, coalesce(v_max, t.max_attempts, c.default_max_attempts),
           CASE WHEN enqueue_service.memory_limit = 0 THEN NULL
                ELSE coalesce(enqueue_service.memory_limit, c.service_memory_limit) END,
           CASE WHEN enqueue_service.cpu_limit = 0 THEN NULL ELSE coalesce(enqueue_service.cpu_limit, c.service_cpu_limit) END
    INTO v_limit, v_max, v_memory, v_cpu
    FROM pgsched.config c
    LEFT JOIN LATERAL (SELECT t1.* FROM pgsched.tasks t1
                       WHERE t1.name = enqueue_service.task AND (t1.tenant IS NULL OR t1.tenant = enqueue_service.tenant)
                       ORDER BY t1.tenant NULLS LAST LIMIT 1) t ON true;
    PERFORM pgsched._check_payload(v_args, v_limit);

    IF enqueue_service.idempotency_key IS NULL THEN
        v_shard := pgsched._home_shard((SELECT c.shards FROM pgsched.config c));
    ELSE
        v_shard := pgsched._shard_for_key(enqueue_service.idempotency_key);
        -- As in enqueue(): the key row is the lock; a repeat returns the holder.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        VALUES (enqueue_service.idempotency_key, enqueue_service.tenant, v_id, v_shard, v_now)
        ON CONFLICT ON CONSTRAINT idempotency_keys_key_tenant DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now;
        IF NOT FOUND THEN
            RETURN pgsched._key_holder(enqueue_service.idempotency_key, enqueue_service.task, v_args, NULL,
                                       enqueue_service.tenant);
        END IF;
    END IF;

    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant,
         service, memory_limit, cpu_limit)
    VALUES (v_id, v_shard, CASE WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, enqueue_service.task, v_args, coalesce(enqueue_service.priority, 0), v_run_at, 0, v_max,
            enqueue_service.idempotency_key, coalesce(enqueue_service.labels, '{}'), enqueue_service.tenant, true,
            v_memory, v_cpu);
    PERFORM pg_catalog.pg_notify(CASE WHEN v_run_at <= v_now THEN 'pgsched_jobs' ELSE 'pgsched_scheduled' END,
                                 CASE WHEN v_run_at <= v_now THEN v_queue ELSE '' END);
    RETURN v_id;
END
$$;
