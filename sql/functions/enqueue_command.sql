-- enqueue_command
-- contract: adds one command job and returns its id: the program argv (no
-- shell unless argv names one), run by a worker started with --commands, in
-- its own process group, with env over a minimal base environment, in cwd
-- (absolute; NULL: the worker's HOME), killed after timeout (NULL: none).
-- The history row's result then holds exit_code, stdout, stderr (tails) and
-- duration_s. Validated before anything is written: argv has 1 to 4096
-- elements, none NULL, the first not empty, at most 128 kB each and 256 kB
-- in all; env is an object of at most 1000 string values under names
-- [A-Za-z_][A-Za-z0-9_]*, 256 kB in all; else invalid_parameter_value
-- naming the parameter. Idempotency keys, run_at, priority, labels and
-- tenants behave as in enqueue(). Granted to pgsched_command only: the task
-- pgsched.command is refused on every other path (_check_command_task).
-- The job is stored as task pgsched.command with args {argv, env, cwd,
-- timeout_s, memory_limit, cpu_limit} and the label pgsched:command, which only --commands workers
-- offer, so no other worker ever claims it. With a timeout, the job's
-- timeout column is timeout + config.command_timeout_margin: the runner
-- kills the program at timeout and records its output within the margin,
-- so the worker's own time limit and the database's deadline (start(),
-- _fail_overdue) fire only when the runner itself failed to end the run.
-- memory_limit (MiB) and cpu_limit (CPUs) bound each run (a cgroup per run,
-- else rlimits: docs/commands.md); NULL takes config.command_memory_limit /
-- command_cpu_limit, 0 means none; stored in args as memory_limit and
-- cpu_limit (JSON null: none). Bad limits: _check_resource_limits.
CREATE OR REPLACE FUNCTION pgsched.enqueue_command(
    argv            text[],
    env             jsonb       DEFAULT '{}',
    cwd             text        DEFAULT NULL,
    timeout         interval    DEFAULT NULL,
    queue           text        DEFAULT 'commands',
    max_attempts    integer     DEFAULT NULL,
    run_at          timestamptz DEFAULT NULL,
    priority        integer     DEFAULT 0,
    idempotency_key text        DEFAULT NULL,
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
    v_run_at timestamptz := coalesce(enqueue_command.run_at, pg_catalog.now());
    v_queue text := coalesce(enqueue_command.queue, 'commands');
    v_env jsonb := coalesce(enqueue_command.env, '{}');
    v_labels text[];
    v_args jsonb;
    v_limit integer;
    v_max integer := enqueue_command.max_attempts;
    v_margin interval;
    v_id bigint := pg_catalog.nextval('pgsched.jobs_id_seq');
    v_shard smallint;
    v_bad text;
    v_memory integer;
    v_cpu real;
BEGIN
    enqueue_command.tenant := coalesce(enqueue_command.tenant, nullif(pgsched._tenant_scope(), ''));
    PERFORM pgsched._check_tenant(enqueue_command.tenant);
    IF enqueue_command.argv IS NULL OR pg_catalog.cardinality(argv) = 0 THEN
        RAISE EXCEPTION 'pgsched: argv must name a program: at least one element'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'argv';
    END IF;
    IF pg_catalog.array_ndims(argv) > 1 OR pg_catalog.cardinality(argv) > 4096 THEN
        RAISE EXCEPTION 'pgsched: argv must be a one-dimensional array of at most 4096 elements, not % in % dimensions',
                pg_catalog.cardinality(argv), pg_catalog.array_ndims(argv)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'argv';
    END IF;
    IF pg_catalog.array_position(argv, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: argv element % is NULL', pg_catalog.array_position(argv, NULL)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'argv';
    END IF;
    IF argv[pg_catalog.array_lower(argv, 1)] = '' THEN
        RAISE EXCEPTION 'pgsched: argv''s first element, the program, is empty'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'argv';
    END IF;
    IF (SELECT pg_catalog.max(pg_catalog.octet_length(a)) FROM unnest(argv) a) > 131072
       OR (SELECT pg_catalog.sum(pg_catalog.octet_length(a)) FROM unnest(argv) a) > 262144 THEN
        RAISE EXCEPTION 'pgsched: argv is too large: at most 128 kB an element and 256 kB in all'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'argv';
    END IF;
    IF pg_catalog.jsonb_typeof(v_env) <> 'object' THEN
        RAISE EXCEPTION 'pgsched: env must be a JSON object of strings, not %', pg_catalog.jsonb_typeof(v_env)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'env';
    END IF;
    SELECT e.key INTO v_bad FROM pg_catalog.jsonb_each(v_env) e
    WHERE pg_catalog.jsonb_typeof(e.value) <> 'string' ORDER BY e.key LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: env value of % must be a string, not %', pgsched._shown(v_bad),
                pg_catalog.jsonb_typeof(v_env -> v_bad)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'env';
    END IF;
    SELECT e.key INTO v_bad FROM pg_catalog.jsonb_each(v_env) e
    WHERE e.key !~ '^[A-Za-z_][A-Za-z0-9_]*$' OR pg_catalog.length(e.key) > 256 ORDER BY e.key LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: env name % is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 256)',
                pgsched._shown(v_bad)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'env';
    END IF;
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.jsonb_object_keys(v_env)) > 1000
       OR pg_catalog.octet_length(v_env::text) > 262144 THEN
        RAISE EXCEPTION 'pgsched: env is too large: at most 1000 variables and 256 kB'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'env';
    END IF;
    IF cwd IS NOT NULL AND (pg_catalog.left(cwd, 1) <> '/' OR pg_catalog.octet_length(cwd) > 4096) THEN
        RAISE EXCEPTION 'pgsched: cwd % must be an absolute path of at most 4096 bytes', pgsched._shown(cwd)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'cwd';
    END IF;
    IF enqueue_command.timeout IS NOT NULL
       AND (enqueue_command.timeout <= interval '0' OR enqueue_command.timeout > interval '366 days') THEN
        RAISE EXCEPTION 'pgsched: timeout % must be positive and at most 366 days (NULL: none)', enqueue_command.timeout
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'timeout';
    END IF;
    PERFORM pgsched._check_resource_limits(enqueue_command.memory_limit, enqueue_command.cpu_limit);

    v_labels := coalesce(enqueue_command.labels, '{}');
    IF NOT 'pgsched:command' = ANY (v_labels) THEN
        v_labels := v_labels || 'pgsched:command'::text;
    END IF;
    SELECT c.max_payload_bytes, coalesce(v_max, t.max_attempts, c.default_max_attempts), c.command_timeout_margin,
           CASE WHEN enqueue_command.memory_limit = 0 THEN NULL
                ELSE coalesce(enqueue_command.memory_limit, c.command_memory_limit) END,
           CASE WHEN enqueue_command.cpu_limit = 0 THEN NULL ELSE coalesce(enqueue_command.cpu_limit, c.command_cpu_limit) END
    INTO v_limit, v_max, v_margin, v_memory, v_cpu
    FROM pgsched.config c
    LEFT JOIN LATERAL (SELECT t1.* FROM pgsched.tasks t1
                       WHERE t1.name = 'pgsched.command' AND (t1.tenant IS NULL OR t1.tenant = enqueue_command.tenant)
                       ORDER BY t1.tenant NULLS LAST LIMIT 1) t ON true;
    v_args := pg_catalog.jsonb_build_object(
        'argv', pg_catalog.to_jsonb(argv), 'env', v_env, 'cwd', cwd,
        'timeout_s', pg_catalog.date_part('epoch', enqueue_command.timeout),
        'memory_limit', v_memory, 'cpu_limit', v_cpu);
    PERFORM pgsched._check_job('pgsched.command', v_queue, v_args, coalesce(enqueue_command.priority, 0), v_run_at,
                               v_max, enqueue_command.idempotency_key, v_labels, enqueue_command.tenant);
    PERFORM pgsched._check_payload(v_args, v_limit);

    IF enqueue_command.idempotency_key IS NULL THEN
        v_shard := pgsched._home_shard((SELECT c.shards FROM pgsched.config c));
    ELSE
        v_shard := pgsched._shard_for_key(enqueue_command.idempotency_key);
        -- As in enqueue(): the key row is the lock; a repeat returns the holder.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        VALUES (enqueue_command.idempotency_key, enqueue_command.tenant, v_id, v_shard, v_now)
        ON CONFLICT ON CONSTRAINT idempotency_keys_key_tenant DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now;
        IF NOT FOUND THEN
            RETURN pgsched._key_holder(enqueue_command.idempotency_key, 'pgsched.command', v_args, NULL,
                                       enqueue_command.tenant);
        END IF;
    END IF;

    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant,
         timeout)
    VALUES (v_id, v_shard, CASE WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, 'pgsched.command', v_args, coalesce(enqueue_command.priority, 0), v_run_at, 0, v_max,
            enqueue_command.idempotency_key, v_labels, enqueue_command.tenant, enqueue_command.timeout + v_margin);
    PERFORM pg_catalog.pg_notify(CASE WHEN v_run_at <= v_now THEN 'pgsched_jobs' ELSE 'pgsched_scheduled' END,
                                 CASE WHEN v_run_at <= v_now THEN v_queue ELSE '' END);
    RETURN v_id;
END
$$;
