-- 0004 down: atomic batches, clear errors, async enqueue

-- The constraints as they were (a key of more than 512 characters makes this fail, changing nothing).
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_idempotency_key_length;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_idempotency_key_length
    CHECK (pg_catalog.length(idempotency_key) BETWEEN 1 AND 512);
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_task_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_task_valid CHECK (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$');
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_queue_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_queue_valid CHECK (queue ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$');

DROP FUNCTION IF EXISTS pgsched._shown(text);
DROP FUNCTION IF EXISTS pgsched._job_problem(text, text, jsonb, integer, timestamptz, integer, text, text[], text);
DROP FUNCTION IF EXISTS pgsched._check_job(text, text, jsonb, integer, timestamptz, integer, text, text[], text, bigint);
-- functions/_check_labels.sql as of the previous revision
-- _check_labels
-- contract: raises check_violation, naming the constraint jobs_labels_valid,
-- when a job's labels contain NULL (no worker could ever offer it, so the job
-- would wait forever).
CREATE OR REPLACE FUNCTION pgsched._check_labels(p_labels text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_labels IS NOT NULL AND pg_catalog.array_position(p_labels, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: job labels may not contain NULL (jobs_labels_valid)'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_labels_valid', SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
END
$$;


-- functions/_check_payload.sql as of the previous revision
-- _check_payload
-- contract: raises check_violation, naming the constraint
-- jobs_args_size_limit, when a job's args are larger than p_limit bytes
-- (pgsched.config.max_payload_bytes). p_row numbers the row in a batch.
CREATE OR REPLACE FUNCTION pgsched._check_payload(p_args jsonb, p_limit integer, p_row bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_size integer;
BEGIN
    -- The text form is at most 6 bytes per stored byte (a \u0001 escape): well below, skip measuring.
    IF p_args IS NULL OR pg_catalog.pg_column_size(p_args) <= p_limit / 6 THEN
        RETURN;
    END IF;
    v_size := pg_catalog.octet_length(p_args::text);
    IF v_size > p_limit THEN
        RAISE EXCEPTION 'pgsched: job args are % bytes, over the limit of % bytes%', v_size, p_limit,
                CASE WHEN p_row IS NULL THEN '' ELSE pg_catalog.format(' (row %s of the batch)', p_row) END
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_args_size_limit',
                  SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'Store large data elsewhere and pass a reference, or raise pgsched.config.max_payload_bytes.';
    END IF;
END
$$;


DROP FUNCTION IF EXISTS pgsched._key_holder(text, text, jsonb, bigint);
-- functions/enqueue.sql as of the previous revision
-- enqueue
-- contract: adds one job and returns its id. For an idempotency key already
-- held by an active job, or by a finished one within the retention window,
-- returns that job's id and adds nothing. The shard derives from the key when
-- there is one (so a key always lands on the same shard), else it is random.
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
    tenant          text        DEFAULT NULL
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
BEGIN
    PERFORM pgsched._check_tenant(enqueue.tenant);
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    PERFORM pgsched._check_payload(enqueue.args, v_limit);
    PERFORM pgsched._check_labels(enqueue.labels);
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
        INSERT INTO pgsched.idempotency_keys AS k (key, job_id, shard, created_at)
        VALUES (enqueue.idempotency_key, v_id, v_shard, v_now)
        ON CONFLICT (key) DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now;
        IF NOT FOUND THEN
            -- A new statement: its snapshot sees the holder we waited for.
            RETURN (SELECT k.job_id FROM pgsched.idempotency_keys k WHERE k.key = enqueue.idempotency_key);
        END IF;
    END IF;

    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);
    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant)
    VALUES (v_id, v_shard, CASE WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, enqueue.task, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0), v_run_at, 0, v_max,
            enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant);
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

    IF v_run_at <= v_now THEN
        PERFORM pg_catalog.pg_notify('pgsched_jobs', v_queue);
    ELSE
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN v_id;
END
$$;


DROP FUNCTION IF EXISTS pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[]);
-- functions/enqueue_many.sql as of the previous revision
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
    v_shards integer;
    v_limit integer;
    v_default_attempts integer;
    v_ords bigint[];
    v_ids bigint[];
    v_keys text[];
    v_queues text[];
    v_scheduled boolean;
BEGIN
    IF tasks IS NULL OR pg_catalog.cardinality(tasks) = 0 THEN
        RETURN;
    END IF;
    -- Every row is checked, also those whose tenant is missing or NULL.
    PERFORM pgsched._check_tenant(x.tenant)
    FROM (SELECT DISTINCT u.tenant FROM unnest(tasks, tenants) AS u(task, tenant)) x;
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    PERFORM pgsched._check_payload(u.a, v_limit, u.n) FROM unnest(args) WITH ORDINALITY AS u(a, n);

    -- Set-based, the work the insert trigger does row by row for a plain
    -- INSERT; the rows then go in as a trusted writer the trigger skips.
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);

    IF idempotency_keys IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(idempotency_keys) k WHERE k IS NOT NULL) THEN
        -- No keys, nothing to deduplicate: one straight INSERT. Ids are drawn
        -- after the sort by input order, so they grow in input order.
        WITH inserted AS (
            INSERT INTO pgsched.jobs AS j
                (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, tenant)
            SELECT pg_catalog.nextval('pgsched.jobs_id_seq'),
                   pg_catalog.floor(pg_catalog.random() * v_shards)::smallint,
                   CASE WHEN coalesce(u.run_at, v_now) <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
                   coalesce(u.queue, 'default'), u.task, coalesce(u.args, '{}'), coalesce(u.priority, 0),
                   coalesce(u.run_at, v_now), 0, coalesce(u.max_attempts, t.max_attempts, v_default_attempts), u.tenant
            FROM unnest(tasks, args, queues, run_ats, priorities, max_attempts, tenants)
                 WITH ORDINALITY AS u(task, args, queue, run_at, priority, max_attempts, tenant, ord)
            LEFT JOIN pgsched.tasks t ON t.name = u.task
            ORDER BY u.ord
            RETURNING j.id, j.queue, j.state
        )
        SELECT pg_catalog.array_agg(i.id ORDER BY i.id),
               pg_catalog.array_agg(DISTINCT i.queue) FILTER (WHERE i.state = 'available'),
               pg_catalog.bool_or(i.state = 'scheduled')
        INTO v_ids, v_queues, v_scheduled
        FROM inserted i;
        PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);
        PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
        IF v_scheduled THEN
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN QUERY SELECT x.o, x.id FROM unnest(v_ids) WITH ORDINALITY AS x(id, o);
        RETURN;
    END IF;

    WITH numbered AS MATERIALIZED (
        -- ids are drawn while the input is read in order, so they grow in
        -- input order (a batch runs first-in, first-out)
        SELECT u.ord, u.task, u.args, coalesce(u.queue, 'default') AS queue, coalesce(u.run_at, v_now) AS run_at,
               u.priority, u.key, u.max_attempts, u.tenant,
               pg_catalog.nextval('pgsched.jobs_id_seq') AS id
        FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants)
             WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, ord)
    ), input AS MATERIALIZED (
        SELECT n.*,
               CASE WHEN n.key IS NULL THEN pg_catalog.floor(pg_catalog.random() * v_shards)::smallint
                    ELSE ((pg_catalog.hashtextextended(n.key, 0) % v_shards + v_shards) % v_shards)::smallint
               END AS shard,
               -- only the first row of a key in this batch is inserted
               n.key IS NULL OR n.ord = pg_catalog.min(n.ord) OVER (PARTITION BY n.key) AS first_of_key
        FROM numbered n
    ), taken AS (
        -- Keys are taken in key order, so concurrent batches sharing keys
        -- wait for each other instead of deadlocking. A key whose retention
        -- ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, job_id, shard, created_at)
        SELECT i.key, i.id, i.shard, v_now
        FROM input i
        WHERE i.key IS NOT NULL AND i.first_of_key
        ORDER BY i.key
        ON CONFLICT (key) DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now
        RETURNING k.job_id
    ), inserted AS (
        INSERT INTO pgsched.jobs AS j
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, tenant)
        SELECT i.id, i.shard,
               CASE WHEN i.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
               i.queue, i.task, coalesce(i.args, '{}'), coalesce(i.priority, 0), i.run_at, 0,
               coalesce(i.max_attempts, t.max_attempts, v_default_attempts), i.key, i.tenant
        FROM input i
        LEFT JOIN pgsched.tasks t ON t.name = i.task
        WHERE i.key IS NULL OR i.id IN (SELECT taken.job_id FROM taken)
        ORDER BY i.ord
        RETURNING j.id, j.queue, j.state
    )
    SELECT pg_catalog.array_agg(i.ord ORDER BY i.ord),
           pg_catalog.array_agg(ins.id ORDER BY i.ord),
           pg_catalog.array_agg(i.key ORDER BY i.ord),
           pg_catalog.array_agg(DISTINCT ins.queue) FILTER (WHERE ins.state = 'available'),
           pg_catalog.bool_or(ins.state = 'scheduled')
    INTO v_ords, v_ids, v_keys, v_queues, v_scheduled
    FROM input i
    LEFT JOIN inserted ins ON ins.id = i.id;
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    IF v_scheduled THEN
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;

    -- Rows whose key was taken: look the holder up in a new statement, whose
    -- snapshot sees a concurrent enqueue of the same key that we waited for.
    RETURN QUERY
    SELECT x.o, coalesce(x.id, (SELECT k.job_id FROM pgsched.idempotency_keys k WHERE k.key = x.k))
    FROM unnest(v_ords, v_ids, v_keys) AS x(o, id, k)
    ORDER BY x.o;
END
$$;


-- functions/tg_jobs__before_insert.sql as of the previous revision
-- tg_jobs__before_insert
-- contract: every row entering pgsched.jobs, by enqueue() or a plain INSERT,
-- gets its defaults, its validation and its wake-up here, so all paths behave
-- alike. A repeated idempotency key skips the row (INSERT 0 0) and keeps the
-- existing job; enqueue() then returns that job's id.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__before_insert()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_limit integer;
    v_default_attempts integer;
BEGIN
    SELECT c.max_payload_bytes, c.default_max_attempts INTO v_limit, v_default_attempts FROM pgsched.config c;

    -- A new job starts from nothing, whatever the INSERT said.
    NEW.attempt := 0;
    NEW.lease_token := NULL;
    NEW.leased_by := NULL;
    NEW.lease_expires_at := NULL;
    NEW.started_at := NULL;
    NEW.cancel_requested_at := NULL;
    NEW.last_error := NULL;
    -- Occurrences of schedules always pass through promotion, which applies
    -- the schedule's overlap policy.
    NEW.state := CASE WHEN NEW.run_at <= v_now AND NEW.schedule IS NULL THEN 'available' ELSE 'scheduled' END;

    PERFORM pgsched._check_payload(NEW.args, v_limit);
    PERFORM pgsched._check_labels(NEW.labels);

    IF NEW.max_attempts IS NULL THEN
        SELECT t.max_attempts INTO NEW.max_attempts FROM pgsched.tasks t WHERE t.name = NEW.task;
        NEW.max_attempts := coalesce(NEW.max_attempts, v_default_attempts);
    END IF;

    IF NEW.idempotency_key IS NOT NULL THEN
        -- The key row is the lock: a concurrent insert of the same key waits
        -- here for the first one's commit, then sees the conflict. A redrive
        -- of the same job (retry()) re-activates its own key; a key whose
        -- retention ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, job_id, shard, created_at)
        VALUES (NEW.idempotency_key, NEW.id, NEW.shard, v_now)
        ON CONFLICT (key) DO UPDATE
            SET job_id = NEW.id, shard = NEW.shard, created_at = v_now, expires_at = NULL
            WHERE k.job_id = NEW.id OR k.expires_at < v_now;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;

    IF NEW.state = 'available' THEN
        -- Delivered at commit; identical notifications in one transaction
        -- are folded into one by PostgreSQL, so a batch sends one per queue.
        PERFORM pg_catalog.pg_notify('pgsched_jobs', NEW.queue);
    ELSE
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN NEW;
END
$$;

GRANT EXECUTE ON FUNCTION
    pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[])
    TO pgsched_enqueue;
REVOKE EXECUTE ON FUNCTION
    pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[])
    FROM PUBLIC;
