-- enqueue
-- contract: adds one job and returns its id. For an idempotency key already
-- held by an active job, or by a finished one within the retention window,
-- returns that job's id and adds nothing (keys are per tenant), provided the
-- task and args are the same (else PS422, see _key_holder). The shard derives from the key when
-- there is one (so a key always lands on the same shard), else it is random.
-- A refused value raises with its column named (see _check_job). timeout:
-- the time limit of each run (NULL: the task's, else none), see start().
-- With depends_on (job ids), the job waits (state 'waiting') until every
-- dependency completed; on_dependency_failure ('cancel', 'wait' or 'run')
-- says what a dependency ending dead or cancelled does to it (see _depend):
-- with 'run' the job runs once every dependency finished, whatever the
-- outcome (a batch callback; dependency_outcomes() tells them).
-- trace_context: the caller's trace propagation headers (see docs/otel.md).
-- concurrency_key (e.g. 'customer:42') is what the queue's per-key limits
-- count (docs/dispatch.md). tenant: NULL in a session confined to a tenant
-- is that tenant; its own task policy (pgsched.tasks) wins over the shared one.
-- on_conflict says what a held key does: 'keep' (the default, also NULL) returns the
-- holder as it is; 'replace' gives the holder this call's args, run_at and
-- priority while it has not started (a debounce; refused with PS423 once it
-- started, see _replace). key_scope says how long the key of a new job is
-- held: 'retention' (NULL, the default) until the retention after the job
-- ended, 'active' until it ends. p_now moves the clock (the owner only).
--
-- It does itself what the insert trigger does for a plain INSERT (defaults,
-- the payload limit, the key, the wake-up), then inserts a row naming its
-- attempt, which the trigger skips (30_triggers.sql): one statement's work
-- instead of two.
DROP FUNCTION IF EXISTS pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text, interval,
                                       bigint[], text, jsonb, text);
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
    concurrency_key text        DEFAULT NULL,
    on_conflict     text        DEFAULT 'keep',
    key_scope       text        DEFAULT NULL,
    p_now           timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan per statement from the first call on, not a custom plan for each of
-- a new connection's first five calls (enqueue_many: ~2 ms a call of 1,000 jobs).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(enqueue.p_now), pg_catalog.now());
    v_run_at timestamptz := coalesce(enqueue.run_at, v_now);
    v_shards integer;
    v_limit integer;
    v_default_attempts integer;
    v_id bigint := pg_catalog.nextval('pgsched.jobs_id_seq');
    v_shard smallint;
    v_queue text := coalesce(enqueue.queue, 'default');
    v_max integer := enqueue.max_attempts;
    v_waits boolean := coalesce(pg_catalog.cardinality(enqueue.depends_on), 0) > 0;
    v_scope text := pgsched._caller_scope();
BEGIN
    -- A session confined to a tenant enqueues into it unless it names one.
    -- The checks below call their helpers only to raise: the common case is
    -- one expression each, no function call of its own.
    enqueue.tenant := coalesce(enqueue.tenant, nullif(v_scope, ''));
    IF v_scope IS NOT NULL AND enqueue.tenant IS DISTINCT FROM v_scope THEN
        PERFORM pgsched._check_tenant(enqueue.tenant);
    END IF;
    IF enqueue.task = 'pgsched.command' THEN
        PERFORM pgsched._check_command_task(enqueue.task, 'enqueue()');
    END IF;
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    IF pgsched._job_problem(enqueue.task, v_queue, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0),
                            v_run_at, v_max, enqueue.idempotency_key, coalesce(enqueue.labels, '{}'),
                            enqueue.tenant) IS NOT NULL THEN
        PERFORM pgsched._check_job(enqueue.task, v_queue, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0),
                                   v_run_at, v_max, enqueue.idempotency_key, coalesce(enqueue.labels, '{}'),
                                   enqueue.tenant);
    END IF;
    IF pg_catalog.pg_column_size(enqueue.args) > v_limit / 6 THEN  -- else well below the limit (_check_payload)
        PERFORM pgsched._check_payload(enqueue.args, v_limit);
    END IF;
    IF enqueue.trace_context IS NOT NULL THEN
        PERFORM pgsched._check_trace_context(enqueue.trace_context);
    END IF;
    IF enqueue.timeout IS NOT NULL OR enqueue.concurrency_key IS NOT NULL THEN
        PERFORM pgsched._check_run_options(enqueue.timeout, enqueue.concurrency_key);
    END IF;
    IF enqueue.on_dependency_failure IS NOT NULL AND enqueue.on_dependency_failure NOT IN ('cancel', 'wait', 'run') THEN
        PERFORM pgsched._depend('{}', '{}', '{}', ARRAY[enqueue.on_dependency_failure], v_now, false);
    END IF;
    IF enqueue.on_conflict IS NOT NULL AND enqueue.on_conflict NOT IN ('keep', 'replace') THEN
        RAISE EXCEPTION 'pgsched: on_conflict must be ''keep'' or ''replace'', not %', pgsched._shown(enqueue.on_conflict)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'on_conflict';
    END IF;
    IF enqueue.key_scope IS NOT NULL AND enqueue.key_scope NOT IN ('active', 'retention') THEN
        RAISE EXCEPTION 'pgsched: key_scope must be ''active'' or ''retention'', not %', pgsched._shown(enqueue.key_scope)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'key_scope';
    END IF;
    IF enqueue.idempotency_key IS NULL THEN
        v_shard := pgsched._home_shard(v_shards);
    ELSE
        v_shard := ((pg_catalog.hashtextextended(enqueue.idempotency_key, 0) % v_shards + v_shards) % v_shards)::smallint;
        -- The key row is the lock: a concurrent enqueue of the same key waits
        -- here for the first one's commit, then sees the conflict. A key whose
        -- retention ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at, scope)
        VALUES (enqueue.idempotency_key, enqueue.tenant, v_id, v_shard, v_now, coalesce(enqueue.key_scope, 'retention'))
        ON CONFLICT ON CONSTRAINT idempotency_keys_key_tenant DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL,
                scope = EXCLUDED.scope
            WHERE k.expires_at < v_now;
        IF NOT FOUND THEN
            -- A new statement: its snapshot sees the holder we waited for
            -- (whose key row this statement locked, also when not updated).
            IF enqueue.on_conflict = 'replace' THEN
                RETURN pgsched._replace(enqueue.idempotency_key, enqueue.tenant, enqueue.task, enqueue.args, v_run_at,
                                        enqueue.priority, v_now);
            END IF;
            RETURN pgsched._key_holder(enqueue.idempotency_key, enqueue.task, enqueue.args, NULL, enqueue.tenant);
        END IF;
    END IF;

    -- The task's max_attempts, the default labels and the claim order are
    -- read here, as tg_jobs__dispatch would (which skips a stamped row).
    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant,
         timeout, trace_context, concurrency_key, depends_on, dispatch_group, dispatch_rank, dispatch_at)
    SELECT v_id, v_shard,
           CASE WHEN v_waits THEN 'waiting' WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
           v_queue, enqueue.task, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0), v_run_at, 0,
           coalesce(v_max, t.max_attempts, v_default_attempts), enqueue.idempotency_key,
           CASE WHEN coalesce(enqueue.labels, '{}') = '{}' THEN coalesce(t.labels, q.labels, '{}') ELSE enqueue.labels END,
           enqueue.tenant, enqueue.timeout, enqueue.trace_context, enqueue.concurrency_key,
           CASE WHEN v_waits THEN enqueue.depends_on END,
           CASE WHEN q.tenant_fairness THEN '*' ELSE '' END,
           CASE WHEN q.aging IS NULL THEN -coalesce(enqueue.priority, 0) ELSE 0 END,
           CASE WHEN q.tenant_fairness
                THEN pgsched._fair_stamp(v_queue, enqueue.tenant, q.tenant_weights, v_run_at, q.aging)
                     - coalesce(coalesce(enqueue.priority, 0) * q.aging, interval '0')
                WHEN q.aging IS NULL THEN v_run_at
                ELSE GREATEST(v_run_at - coalesce(enqueue.priority, 0) * q.aging, v_now - 1000000 * q.aging) END
    FROM (SELECT) AS one
    LEFT JOIN pgsched.queues q ON q.name = v_queue
    LEFT JOIN LATERAL (SELECT t1.* FROM pgsched.tasks t1
                       WHERE t1.name = enqueue.task AND (t1.tenant IS NULL OR t1.tenant = enqueue.tenant)
                       ORDER BY t1.tenant NULLS LAST LIMIT 1) t ON true;

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
