-- enqueue_many
-- contract: enqueue() for many jobs in one statement, all or nothing; returns
-- one id per input row, in input order (for a repeated idempotency key, the
-- holder's id; rows repeating a key within the batch get the first row's
-- job; a repeated key with another task or other args raises PS422). Arrays
-- are parallel: each one given has exactly one element per task (else
-- invalid_parameter_value, naming the array); a NULL array, or a NULL
-- element, means the default. labels are JSON arrays of strings, one per job.
-- depends_on are JSON arrays, one per job, of job ids and of references to
-- earlier rows of this batch as negative 1-based positions (-1 is the first
-- row), so a whole graph is one call; on_dependency_failure ('cancel' or
-- 'wait') is each job's policy for a dependency ending dead or cancelled
-- (see _depend).
-- A refused row raises naming its position (1-based, the ord returned), its
-- column and its value; nothing of the batch is written. trace_context (the
-- caller's trace propagation headers) is stored with every job of the batch.
-- timeouts (each run's time limit; NULL: the task's, else none) and
-- concurrency_keys (what the queue's per-key limits count) are per job, as
-- in enqueue(). A NULL tenant in a session confined to a tenant is that tenant.
-- key_scopes: how long each new job's idempotency key is held
-- ('retention', NULL, or 'active'), as enqueue()'s key_scope.
DROP FUNCTION IF EXISTS pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[],
                                            text[], jsonb[], jsonb[], text[], jsonb, interval[], text[]);
CREATE OR REPLACE FUNCTION pgsched.enqueue_many(
    tasks            text[],
    args             jsonb[]       DEFAULT NULL,
    queues           text[]        DEFAULT NULL,
    run_ats          timestamptz[] DEFAULT NULL,
    priorities       integer[]     DEFAULT NULL,
    idempotency_keys text[]        DEFAULT NULL,
    max_attempts     integer[]     DEFAULT NULL,
    tenants          text[]        DEFAULT NULL,
    labels           jsonb[]       DEFAULT NULL,
    depends_on       jsonb[]       DEFAULT NULL,
    on_dependency_failure text[]   DEFAULT NULL,
    trace_context    jsonb         DEFAULT NULL,
    timeouts         interval[]    DEFAULT NULL,
    concurrency_keys text[]        DEFAULT NULL,
    key_scopes       text[]        DEFAULT NULL
)
RETURNS TABLE (ord bigint, job_id bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan per statement from the first call on, not a custom plan for each of
-- a new connection's first five calls (enqueue_many: ~2 ms a call of 1,000 jobs).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_shards integer;
    v_limit integer;
    v_default_attempts integer;
    v_ords bigint[];
    v_ids bigint[];
    v_keys text[];
    v_tenants text[];
    v_queues text[];
    v_scheduled boolean;
    v_n integer := pg_catalog.cardinality(tasks);
    v_bad record;
    v_shard_list smallint[];
    v_final bigint[];
    v_scope text;
    v_scope_raw text;
    v_fair timestamptz[];
    v_waits boolean := EXISTS (SELECT 1 FROM unnest(depends_on) d
                               WHERE pg_catalog.jsonb_typeof(d) <> 'array' OR pg_catalog.jsonb_array_length(d) > 0);
BEGIN
    IF tasks IS NULL OR v_n = 0 THEN
        RETURN;
    END IF;
    -- unnest() pads short arrays with NULLs, which would mean "the default"
    -- for a value the caller did send: refuse any length but the batch's.
    SELECT a.name, a.len, a.dims INTO v_bad
    FROM (VALUES ('tasks', v_n, pg_catalog.array_ndims(tasks)),
                 ('args', pg_catalog.cardinality(args), pg_catalog.array_ndims(args)),
                 ('queues', pg_catalog.cardinality(queues), pg_catalog.array_ndims(queues)),
                 ('run_ats', pg_catalog.cardinality(run_ats), pg_catalog.array_ndims(run_ats)),
                 ('priorities', pg_catalog.cardinality(priorities), pg_catalog.array_ndims(priorities)),
                 ('idempotency_keys', pg_catalog.cardinality(idempotency_keys), pg_catalog.array_ndims(idempotency_keys)),
                 ('max_attempts', pg_catalog.cardinality(max_attempts), pg_catalog.array_ndims(max_attempts)),
                 ('tenants', pg_catalog.cardinality(tenants), pg_catalog.array_ndims(tenants)),
                 ('labels', pg_catalog.cardinality(labels), pg_catalog.array_ndims(labels)),
                 ('depends_on', pg_catalog.cardinality(depends_on), pg_catalog.array_ndims(depends_on)),
                 ('on_dependency_failure', pg_catalog.cardinality(on_dependency_failure),
                  pg_catalog.array_ndims(on_dependency_failure)),
                 ('timeouts', pg_catalog.cardinality(timeouts), pg_catalog.array_ndims(timeouts)),
                 ('concurrency_keys', pg_catalog.cardinality(concurrency_keys),
                  pg_catalog.array_ndims(concurrency_keys)),
                 ('key_scopes', pg_catalog.cardinality(key_scopes), pg_catalog.array_ndims(key_scopes))) AS a(name, len, dims)
    WHERE a.len IS NOT NULL AND (a.len <> v_n OR a.dims > 1)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: enqueue_many: % has % elements%, tasks has %: every array given must have one element per job (or be NULL for all defaults)',
                v_bad.name, v_bad.len, CASE WHEN v_bad.dims > 1 THEN pg_catalog.format(' in %s dimensions', v_bad.dims) ELSE '' END, v_n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A session confined to a tenant enqueues into it where a row names none.
    v_scope_raw := pgsched._caller_scope();
    v_scope := nullif(v_scope_raw, '');
    IF v_scope IS NOT NULL THEN
        tenants := ARRAY(SELECT coalesce(u.tenant, v_scope)
                         FROM unnest(coalesce(tenants, pg_catalog.array_fill(NULL::text, ARRAY[v_n])))
                              WITH ORDINALITY AS u(tenant, ord)
                         ORDER BY u.ord);
    END IF;
    -- (each check below reads the batch only when it can fail)
    IF key_scopes IS NOT NULL THEN
        SELECT u.scope, u.ord INTO v_bad FROM unnest(key_scopes) WITH ORDINALITY AS u(scope, ord)
        WHERE u.scope NOT IN ('active', 'retention') ORDER BY u.ord LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgsched: row % of the batch: key_scope must be ''active'' or ''retention'', not %',
                    v_bad.ord, pgsched._shown(v_bad.scope)
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'key_scope';
        END IF;
    END IF;
    IF 'pgsched.command' = ANY (tasks) THEN
        PERFORM pgsched._check_command_task(u.task, pg_catalog.format('enqueue_many() row %s', u.ord))
        FROM unnest(tasks) WITH ORDINALITY AS u(task, ord)
        WHERE u.task = 'pgsched.command';
    END IF;
    -- Every row is checked, also those whose tenant is NULL; a session
    -- confined to no tenant may name any (_check_tenant).
    IF v_scope_raw IS NOT NULL THEN
        FOR v_bad IN SELECT u.tenant, pg_catalog.min(u.ord) AS ord
                     FROM unnest(tenants, tasks) WITH ORDINALITY AS u(tenant, task, ord)
                     GROUP BY u.tenant LOOP
            BEGIN
                PERFORM pgsched._check_tenant(v_bad.tenant);
            EXCEPTION WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'pgsched: row % of the batch: %', v_bad.ord, pg_catalog.substr(SQLERRM, 10)
                    USING ERRCODE = 'insufficient_privilege', COLUMN = 'tenant';
            END;
        END LOOP;
    END IF;
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    -- One set-based pass over the rules (_job_problem is inlined; labels,
    -- JSON here, are checked as JSON); only the first bad row goes through
    -- _check_job, which raises naming it.
    SELECT u.ord, u.task, coalesce(u.queue, 'default') AS queue, coalesce(u.args, '{}') AS args,
           coalesce(u.priority, 0) AS priority, coalesce(u.run_at, v_now) AS run_at, u.max_attempts, u.key,
           u.labels, u.tenant,
           u.labels IS NOT NULL AND (pg_catalog.jsonb_typeof(u.labels) <> 'array'
                                     OR u.labels @? '$[*] ? (@.type() != "string" || @ == "")') AS labels_bad
    INTO v_bad
    FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels)
         WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, ord)
    WHERE (u.labels IS NOT NULL AND (pg_catalog.jsonb_typeof(u.labels) <> 'array'
                                     OR u.labels @? '$[*] ? (@.type() != "string" || @ == "")'))
       OR pgsched._job_problem(u.task, coalesce(u.queue, 'default'), coalesce(u.args, '{}'), coalesce(u.priority, 0),
                               coalesce(u.run_at, v_now), u.max_attempts, u.key, '{}', u.tenant) IS NOT NULL
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        IF v_bad.labels_bad THEN
            RAISE EXCEPTION 'pgsched: row % of the batch: labels % must be a JSON array of non-empty strings (jobs_labels_valid)',
                    v_bad.ord, pgsched._shown(v_bad.labels::text)
                USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_labels_valid', COLUMN = 'labels',
                      SCHEMA = 'pgsched', TABLE = 'jobs';
        END IF;
        PERFORM pgsched._check_job(v_bad.task, v_bad.queue, v_bad.args, v_bad.priority, v_bad.run_at,
                                   v_bad.max_attempts, v_bad.key, '{}', v_bad.tenant, v_bad.ord);
    END IF;
    PERFORM pgsched._check_payload(u.a, v_limit, u.n) FROM unnest(args) WITH ORDINALITY AS u(a, n)
    WHERE pg_catalog.pg_column_size(u.a) > v_limit / 6;
    IF enqueue_many.trace_context IS NOT NULL THEN
        PERFORM pgsched._check_trace_context(enqueue_many.trace_context);
    END IF;
    IF timeouts IS NOT NULL OR concurrency_keys IS NOT NULL THEN
        PERFORM pgsched._check_run_options(u.timeout, u.ckey, u.ord)
        FROM unnest(timeouts, concurrency_keys) WITH ORDINALITY AS u(timeout, ckey, ord)
        WHERE pgsched._run_options_problem(u.timeout, u.ckey) IS NOT NULL;
    END IF;

    -- Set-based, the work the insert trigger does row by row for a plain
    -- INSERT; the rows then go in naming their attempt, which the trigger
    -- skips (30_triggers.sql). Rows of a queue with tenant fairness get their
    -- places in its line first, in one statement (_fair_stamps).
    IF EXISTS (SELECT 1 FROM pgsched.queues q
               WHERE q.tenant_fairness
                 AND EXISTS (SELECT 1 FROM unnest(coalesce(queues, ARRAY[NULL::text])) x
                             WHERE coalesce(x, 'default') = q.name)) THEN
        v_fair := pgsched._fair_stamps(queues, tenants, run_ats, v_now, v_n);
    END IF;
    -- Their default labels and claim order are stamped here too, as
    -- tg_jobs__dispatch would (which skips a stamped row).

    IF idempotency_keys IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(idempotency_keys) k WHERE k IS NOT NULL) THEN
        -- No keys, nothing to deduplicate: one straight INSERT. Ids are drawn
        -- after the sort by input order, so they grow in input order.
        WITH inserted AS (
            INSERT INTO pgsched.jobs AS j
                (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, tenant, labels,
                 trace_context, timeout, concurrency_key, dispatch_group, dispatch_rank, dispatch_at)
            SELECT pg_catalog.nextval('pgsched.jobs_id_seq'),
                   pgsched._home_shard(v_shards),
                   CASE WHEN pg_catalog.jsonb_typeof(u.deps) <> 'array' OR pg_catalog.jsonb_array_length(u.deps) > 0
                        THEN 'waiting'
                        WHEN coalesce(u.run_at, v_now) <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
                   coalesce(u.queue, 'default'), u.task, coalesce(u.args, '{}'), coalesce(u.priority, 0),
                   coalesce(u.run_at, v_now), 0,
                   coalesce(u.max_attempts, CASE WHEN tt.name IS NULL THEN ts.max_attempts ELSE tt.max_attempts END,
                            v_default_attempts), u.tenant,
                   CASE WHEN l.labels = '{}'
                        THEN coalesce(CASE WHEN tt.name IS NULL THEN ts.labels ELSE tt.labels END, q.labels, '{}')
                        ELSE l.labels END,
                   enqueue_many.trace_context, u.timeout, u.ckey,
                   CASE WHEN q.tenant_fairness THEN '*' ELSE '' END,
                   CASE WHEN q.aging IS NULL THEN -coalesce(u.priority, 0) ELSE 0 END,
                   CASE WHEN q.tenant_fairness
                        THEN v_fair[u.ord]
                             - coalesce(coalesce(u.priority, 0) * q.aging, interval '0')
                        WHEN q.aging IS NULL THEN coalesce(u.run_at, v_now)
                        ELSE GREATEST(coalesce(u.run_at, v_now) - coalesce(u.priority, 0) * q.aging,
                                      v_now - 1000000 * q.aging) END
            FROM unnest(tasks, args, queues, run_ats, priorities, max_attempts, tenants, labels, depends_on, timeouts,
                        concurrency_keys)
                 WITH ORDINALITY AS u(task, args, queue, run_at, priority, max_attempts, tenant, labels, deps, timeout,
                                      ckey, ord)
            CROSS JOIN LATERAL (SELECT CASE WHEN u.labels IS NULL THEN '{}'::text[]
                                            ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(u.labels))
                                       END AS labels) l
            -- the tenant's own task policy (tt), as a whole, else the shared one (ts): joins, not a
            -- lookup per row
            LEFT JOIN pgsched.tasks tt ON tt.name = u.task AND tt.tenant = u.tenant
            LEFT JOIN pgsched.tasks ts ON ts.name = u.task AND ts.tenant IS NULL
            LEFT JOIN pgsched.queues q ON q.name = coalesce(u.queue, 'default')
            ORDER BY u.ord
            RETURNING j.id, j.shard, j.queue, j.state
        )
        SELECT pg_catalog.array_agg(i.id ORDER BY i.id), pg_catalog.array_agg(i.shard ORDER BY i.id),
               pg_catalog.array_agg(DISTINCT i.queue) FILTER (WHERE i.state = 'available'),
               pg_catalog.bool_or(i.state = 'scheduled')
        INTO v_ids, v_shard_list, v_queues, v_scheduled
        FROM inserted i;
        PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
        IF v_scheduled THEN
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        IF v_waits OR on_dependency_failure IS NOT NULL THEN
            PERFORM pgsched._depend(v_ids, v_shard_list, depends_on, on_dependency_failure, v_now);
        END IF;
        RETURN QUERY SELECT x.o, x.id FROM unnest(v_ids) WITH ORDINALITY AS x(id, o);
        RETURN;
    END IF;

    WITH numbered AS MATERIALIZED (
        -- ids are drawn while the input is read in order, so they grow in
        -- input order (a batch runs first-in, first-out)
        SELECT u.ord, u.task, u.args, coalesce(u.queue, 'default') AS queue, coalesce(u.run_at, v_now) AS run_at,
               u.priority, u.key, u.max_attempts, u.tenant, u.labels, u.deps, u.timeout, u.ckey, u.scope,
               pg_catalog.nextval('pgsched.jobs_id_seq') AS id
        FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels, depends_on,
                    timeouts, concurrency_keys, key_scopes)
             WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, deps, timeout,
                                  ckey, scope, ord)
    ), input AS MATERIALIZED (
        SELECT n.*,
               CASE WHEN n.key IS NULL THEN pgsched._home_shard(v_shards)
                    ELSE ((pg_catalog.hashtextextended(n.key, 0) % v_shards + v_shards) % v_shards)::smallint
               END AS shard,
               -- only the first row of a key in this batch is inserted
               n.key IS NULL OR n.ord = pg_catalog.min(n.ord) OVER (PARTITION BY n.key, n.tenant) AS first_of_key
        FROM numbered n
    ), taken AS (
        -- Keys are taken in key order, so concurrent batches sharing keys
        -- wait for each other instead of deadlocking. A key whose retention
        -- ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at, scope)
        SELECT i.key, i.tenant, i.id, i.shard, v_now, coalesce(i.scope, 'retention')
        FROM input i
        WHERE i.key IS NOT NULL AND i.first_of_key
        ORDER BY i.key
        ON CONFLICT (key, tenant) DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL,
                scope = EXCLUDED.scope
            WHERE k.expires_at < v_now
        RETURNING k.job_id
    ), inserted AS (
        INSERT INTO pgsched.jobs AS j
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, tenant,
             labels, trace_context, timeout, concurrency_key, dispatch_group, dispatch_rank, dispatch_at)
        SELECT i.id, i.shard,
               CASE WHEN pg_catalog.jsonb_typeof(i.deps) <> 'array' OR pg_catalog.jsonb_array_length(i.deps) > 0
                    THEN 'waiting'
                    WHEN i.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
               i.queue, i.task, coalesce(i.args, '{}'), coalesce(i.priority, 0), i.run_at, 0,
               coalesce(i.max_attempts, CASE WHEN tt.name IS NULL THEN ts.max_attempts ELSE tt.max_attempts END,
                        v_default_attempts), i.key, i.tenant,
               CASE WHEN l.labels = '{}'
                    THEN coalesce(CASE WHEN tt.name IS NULL THEN ts.labels ELSE tt.labels END, q.labels, '{}')
                    ELSE l.labels END,
               enqueue_many.trace_context, i.timeout, i.ckey,
               CASE WHEN q.tenant_fairness THEN '*' ELSE '' END,
               CASE WHEN q.aging IS NULL THEN -coalesce(i.priority, 0) ELSE 0 END,
               CASE WHEN q.tenant_fairness
                    THEN v_fair[i.ord]
                         - coalesce(coalesce(i.priority, 0) * q.aging, interval '0')
                    WHEN q.aging IS NULL THEN i.run_at
                    ELSE GREATEST(i.run_at - coalesce(i.priority, 0) * q.aging, v_now - 1000000 * q.aging) END
        FROM input i
        CROSS JOIN LATERAL (SELECT CASE WHEN i.labels IS NULL THEN '{}'::text[]
                                        ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(i.labels))
                                   END AS labels) l
        -- the tenant's own task policy (tt), as a whole, else the shared one (ts): joins, not a
        -- lookup per row
        LEFT JOIN pgsched.tasks tt ON tt.name = i.task AND tt.tenant = i.tenant
        LEFT JOIN pgsched.tasks ts ON ts.name = i.task AND ts.tenant IS NULL
        LEFT JOIN pgsched.queues q ON q.name = i.queue
        WHERE i.key IS NULL OR i.id IN (SELECT taken.job_id FROM taken)
        ORDER BY i.ord
        RETURNING j.id, j.shard, j.queue, j.state
    )
    SELECT pg_catalog.array_agg(i.ord ORDER BY i.ord),
           pg_catalog.array_agg(ins.id ORDER BY i.ord),
           pg_catalog.array_agg(ins.shard ORDER BY i.ord),
           pg_catalog.array_agg(i.key ORDER BY i.ord),
           pg_catalog.array_agg(i.tenant ORDER BY i.ord),
           pg_catalog.array_agg(DISTINCT ins.queue) FILTER (WHERE ins.state = 'available'),
           pg_catalog.bool_or(ins.state = 'scheduled')
    INTO v_ords, v_ids, v_shard_list, v_keys, v_tenants, v_queues, v_scheduled
    FROM input i
    LEFT JOIN inserted ins ON ins.id = i.id;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    IF v_scheduled THEN
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;

    -- Rows whose key was taken: look the holder up in a new statement, whose
    -- snapshot sees a concurrent enqueue of the same key that we waited for,
    -- and refuse the batch if it holds other work (PS422, naming the row).
    SELECT pg_catalog.array_agg(coalesce(x.id, pgsched._key_holder(x.k, u.task, u.args, x.o, x.t)) ORDER BY x.o)
    INTO v_final
    FROM unnest(v_ords, v_ids, v_keys, v_tenants) AS x(o, id, k, t)
    JOIN unnest(tasks, args) WITH ORDINALITY AS u(task, args, n) ON u.n = x.o;
    -- Dependencies of the rows inserted; a row that found its key held
    -- adds none (the holder stands), and references to it mean the holder.
    IF v_waits OR on_dependency_failure IS NOT NULL THEN
        PERFORM pgsched._depend(v_final, v_shard_list,
                                ARRAY(SELECT CASE WHEN x.id IS NOT NULL THEN x.d END
                                      FROM unnest(v_ids, depends_on) WITH ORDINALITY AS x(id, d, o) ORDER BY x.o),
                                on_dependency_failure, v_now);
    END IF;
    RETURN QUERY SELECT x.o, x.id FROM unnest(v_final) WITH ORDINALITY AS x(id, o);
END
$$;
