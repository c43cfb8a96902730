-- 0004: atomic batches, clear errors, async enqueue


-- functions/_shown.sql
-- _shown
-- contract: a value quoted for an error message (NULL as NULL), cut to its
-- first 60 characters so a megabyte of input does not become the message.
CREATE OR REPLACE FUNCTION pgsched._shown(p_value text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN pg_catalog.length(p_value) > 60
            THEN pg_catalog.quote_nullable(pg_catalog.left(p_value, 60)) || '...'
            ELSE pg_catalog.quote_nullable(p_value) END
$$;


-- functions/_job_problem.sql
-- _job_problem
-- contract: the name of the first rule of pgsched.jobs that a new job with
-- these values breaks (a CHECK constraint's name, or jobs_<column>_not_null),
-- NULL when it breaks none. The same rules as the table's constraints, plus
-- those the functions keep (labels, the key's length in bytes), so a job is
-- refused with its value named before any row or key is written. A plain SQL
-- expression: the planner inlines it into a batch's one set-based check.
CREATE OR REPLACE FUNCTION pgsched._job_problem(
    p_task text, p_queue text, p_args jsonb, p_priority integer, p_run_at timestamptz,
    p_max_attempts integer, p_key text, p_labels text[], p_tenant text
)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE
    WHEN p_task IS NULL THEN 'jobs_task_not_null'
    WHEN p_task !~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' OR pg_catalog.length(p_task) > 200 THEN 'jobs_task_valid'
    WHEN p_queue IS NULL THEN 'jobs_queue_not_null'
    WHEN p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$' OR pg_catalog.length(p_queue) > 63 THEN 'jobs_queue_valid'
    WHEN p_args IS NULL THEN 'jobs_args_not_null'
    WHEN pg_catalog.jsonb_typeof(p_args) <> 'object' THEN 'jobs_args_is_object'
    WHEN p_priority IS NULL THEN 'jobs_priority_not_null'
    WHEN p_priority NOT BETWEEN -1000000 AND 1000000 THEN 'jobs_priority_range'
    WHEN p_run_at IS NULL THEN 'jobs_run_at_not_null'
    WHEN NOT pg_catalog.isfinite(p_run_at) THEN 'jobs_run_at_finite'
    WHEN p_max_attempts <= 0 THEN 'jobs_max_attempts_positive'
    WHEN pg_catalog.octet_length(p_key) NOT BETWEEN 1 AND 1000 THEN 'jobs_idempotency_key_length'
    WHEN p_labels IS NULL THEN 'jobs_labels_not_null'
    WHEN pg_catalog.array_position(p_labels, NULL) IS NOT NULL
      OR pg_catalog.array_position(p_labels, ''::text) IS NOT NULL THEN 'jobs_labels_valid'
    WHEN pg_catalog.length(p_tenant) NOT BETWEEN 1 AND 200 THEN 'jobs_tenant_length'
END
$$;


-- functions/_check_job.sql
-- _check_job
-- contract: raises, naming the rule, the column and the value that is wrong,
-- when a new job breaks a rule of pgsched.jobs (see _job_problem):
-- not_null_violation for a missing value, check_violation otherwise, with
-- CONSTRAINT, COLUMN, TABLE and SCHEMA set. p_row, 1-based, is the job's
-- position in a batch (the ord that enqueue_many returns) and leads the
-- message. Long values are cut to their first 60 characters.
CREATE OR REPLACE FUNCTION pgsched._check_job(
    p_task text, p_queue text, p_args jsonb, p_priority integer, p_run_at timestamptz,
    p_max_attempts integer, p_key text, p_labels text[], p_tenant text, p_row bigint DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_rule text := pgsched._job_problem(p_task, p_queue, p_args, p_priority, p_run_at,
                                        p_max_attempts, p_key, p_labels, p_tenant);
    v_column text;
    v_message text;
    v_prefix text := CASE WHEN p_row IS NULL THEN 'pgsched: ' ELSE pg_catalog.format('pgsched: row %s of the batch: ', p_row) END;
BEGIN
    IF v_rule IS NULL THEN
        RETURN;
    END IF;
    IF v_rule LIKE '%\_not\_null' THEN
        v_column := pg_catalog.substr(v_rule, 6, pg_catalog.length(v_rule) - 14);
        RAISE EXCEPTION '%column "%" may not be NULL', v_prefix, v_column
            USING ERRCODE = 'not_null_violation', COLUMN = v_column, SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
    v_column := CASE v_rule
        WHEN 'jobs_task_valid' THEN 'task'
        WHEN 'jobs_queue_valid' THEN 'queue'
        WHEN 'jobs_args_is_object' THEN 'args'
        WHEN 'jobs_priority_range' THEN 'priority'
        WHEN 'jobs_run_at_finite' THEN 'run_at'
        WHEN 'jobs_max_attempts_positive' THEN 'max_attempts'
        WHEN 'jobs_idempotency_key_length' THEN 'idempotency_key'
        WHEN 'jobs_labels_valid' THEN 'labels'
        WHEN 'jobs_tenant_length' THEN 'tenant'
    END;
    v_message := CASE v_rule
        WHEN 'jobs_task_valid' THEN pg_catalog.format(
            'task %s is not a valid task name (1 to 200 of A-Z a-z 0-9 _ . : -, starting with a letter or _)',
            pgsched._shown(p_task))
        WHEN 'jobs_queue_valid' THEN pg_catalog.format(
            'queue %s is not a valid queue name (1 to 63 of A-Z a-z 0-9 _ . : -, not starting with . : -)',
            pgsched._shown(p_queue))
        WHEN 'jobs_args_is_object' THEN pg_catalog.format(
            'args must be a JSON object, not %s %s', pg_catalog.jsonb_typeof(p_args), pgsched._shown(p_args::text))
        WHEN 'jobs_priority_range' THEN pg_catalog.format(
            'priority %s is out of range (-1000000 to 1000000)', p_priority)
        WHEN 'jobs_run_at_finite' THEN pg_catalog.format('run_at %s is not a finite time', p_run_at)
        WHEN 'jobs_max_attempts_positive' THEN pg_catalog.format(
            'max_attempts %s is not allowed: at least 1 (NULL means the default)', p_max_attempts)
        WHEN 'jobs_idempotency_key_length' THEN pg_catalog.format(
            'idempotency_key %s is %s bytes long: it must be 1 to 1000 bytes',
            pgsched._shown(p_key), pg_catalog.octet_length(p_key))
        WHEN 'jobs_labels_valid' THEN pg_catalog.format(
            'labels %s may not contain NULL or empty labels (no worker could offer them)',
            pgsched._shown(p_labels::text))
        WHEN 'jobs_tenant_length' THEN pg_catalog.format(
            'tenant %s must be 1 to 200 characters long', pgsched._shown(p_tenant))
    END;
    RAISE EXCEPTION '% (%)', v_prefix || v_message, v_rule
        USING ERRCODE = 'check_violation', CONSTRAINT = v_rule, COLUMN = v_column, SCHEMA = 'pgsched', TABLE = 'jobs';
END
$$;


-- functions/_check_labels.sql
-- _check_labels
-- contract: raises check_violation, naming the constraint jobs_labels_valid,
-- when a job's labels contain NULL or an empty label (no worker could ever
-- offer it, so the job would wait forever). Jobs are checked by _check_job,
-- which applies the same rule; this one serves callers that hold only labels.
CREATE OR REPLACE FUNCTION pgsched._check_labels(p_labels text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF pg_catalog.array_position(p_labels, NULL) IS NOT NULL OR pg_catalog.array_position(p_labels, '') IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: labels % may not contain NULL or empty labels (jobs_labels_valid)',
                pgsched._shown(p_labels::text)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_labels_valid', COLUMN = 'labels',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
END
$$;


-- functions/_check_payload.sql
-- _check_payload
-- contract: raises check_violation, naming the constraint
-- jobs_args_size_limit, when a job's args are larger than p_limit bytes
-- (pgsched.config.max_payload_bytes), measured as compact JSON text in UTF-8
-- (no whitespace between tokens: what json.dumps(args, separators=(",", ":"),
-- ensure_ascii=False) writes), so a client's exact count holds at the
-- boundary. p_row, 1-based, numbers the row in a batch.
CREATE OR REPLACE FUNCTION pgsched._check_payload(p_args jsonb, p_limit integer, p_row bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_text text;
    v_size integer;
    v_bare text;
BEGIN
    -- The text form is at most 6 bytes per stored byte (a \u0001 escape): well below, skip measuring.
    IF p_args IS NULL OR pg_catalog.pg_column_size(p_args) <= p_limit / 6 THEN
        RETURN;
    END IF;
    v_text := p_args::text;
    v_size := pg_catalog.octet_length(v_text);
    IF v_size > p_limit THEN
        -- jsonb's text form adds one space after every , and : between
        -- tokens and none elsewhere outside strings: drop the strings, count
        -- the spaces left. Paid only by args near or over the limit.
        v_bare := pg_catalog.regexp_replace(v_text, '"(?:[^"\\]|\\.)*"', '', 'g');
        v_size := v_size - (pg_catalog.length(v_bare) - pg_catalog.length(pg_catalog.replace(v_bare, ' ', '')));
    END IF;
    IF v_size > p_limit THEN
        RAISE EXCEPTION 'pgsched: %args are % bytes of JSON, over the limit of % bytes (jobs_args_size_limit)',
                CASE WHEN p_row IS NULL THEN '' ELSE pg_catalog.format('row %s of the batch: ', p_row) END,
                v_size, p_limit
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_args_size_limit', COLUMN = 'args',
                  SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'Store large data elsewhere and pass a reference, or raise pgsched.config.max_payload_bytes.';
    END IF;
END
$$;


-- functions/_key_holder.sql
-- _key_holder
-- contract: the id of the job holding idempotency key p_key (NULL when none
-- does). A repeated key must repeat the work: when the holder (active, or
-- finished within the retention) has another task or other args than
-- p_task/p_args, raises SQLSTATE PS422 naming the key and the holder instead
-- of handing back another job's id. Options (queue, run_at, priority...) are
-- not compared: the first enqueue's stand. p_row, 1-based, numbers the row in
-- a batch. Each statement here takes a new snapshot, so it sees a concurrent
-- holder that the caller's key insert waited for.
CREATE OR REPLACE FUNCTION pgsched._key_holder(p_key text, p_task text, p_args jsonb, p_row bigint DEFAULT NULL)
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
    SELECT k.job_id, k.shard INTO v_id, v_shard FROM pgsched.idempotency_keys k WHERE k.key = p_key;
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


-- functions/enqueue.sql
-- enqueue
-- contract: adds one job and returns its id. For an idempotency key already
-- held by an active job, or by a finished one within the retention window,
-- returns that job's id and adds nothing, provided the task and args are the
-- same (else PS422, see _key_holder). The shard derives from the key when
-- there is one (so a key always lands on the same shard), else it is random.
-- A refused value raises with its column named (see _check_job).
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
    PERFORM pgsched._check_job(enqueue.task, v_queue, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0),
                               v_run_at, v_max, enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant);
    PERFORM pgsched._check_payload(enqueue.args, v_limit);
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
            RETURN pgsched._key_holder(enqueue.idempotency_key, enqueue.task, enqueue.args);
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


-- functions/enqueue_many.sql
-- enqueue_many
-- contract: enqueue() for many jobs in one statement, all or nothing; returns
-- one id per input row, in input order (for a repeated idempotency key, the
-- holder's id; rows repeating a key within the batch get the first row's
-- job; a repeated key with another task or other args raises PS422). Arrays
-- are parallel: each one given has exactly one element per task (else
-- invalid_parameter_value, naming the array); a NULL array, or a NULL
-- element, means the default. labels are JSON arrays of strings, one per job.
-- A refused row raises naming its position (1-based, the ord returned), its
-- column and its value; nothing of the batch is written.
CREATE OR REPLACE FUNCTION pgsched.enqueue_many(
    tasks            text[],
    args             jsonb[]       DEFAULT NULL,
    queues           text[]        DEFAULT NULL,
    run_ats          timestamptz[] DEFAULT NULL,
    priorities       integer[]     DEFAULT NULL,
    idempotency_keys text[]        DEFAULT NULL,
    max_attempts     integer[]     DEFAULT NULL,
    tenants          text[]        DEFAULT NULL,
    labels           jsonb[]       DEFAULT NULL
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
    v_n integer := pg_catalog.cardinality(tasks);
    v_bad record;
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
                 ('labels', pg_catalog.cardinality(labels), pg_catalog.array_ndims(labels))) AS a(name, len, dims)
    WHERE a.len IS NOT NULL AND (a.len <> v_n OR a.dims > 1)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: enqueue_many: % has % elements%, tasks has %: every array given must have one element per job (or be NULL for all defaults)',
                v_bad.name, v_bad.len, CASE WHEN v_bad.dims > 1 THEN pg_catalog.format(' in %s dimensions', v_bad.dims) ELSE '' END, v_n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Every row is checked, also those whose tenant is NULL.
    FOR v_bad IN SELECT u.tenant, pg_catalog.min(u.ord) AS ord
                 FROM unnest(tenants, tasks) WITH ORDINALITY AS u(tenant, task, ord) GROUP BY u.tenant LOOP
        BEGIN
            PERFORM pgsched._check_tenant(v_bad.tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'pgsched: row % of the batch: %', v_bad.ord, pg_catalog.substr(SQLERRM, 10)
                USING ERRCODE = 'insufficient_privilege', COLUMN = 'tenant';
        END;
    END LOOP;
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

    -- Set-based, the work the insert trigger does row by row for a plain
    -- INSERT; the rows then go in as a trusted writer the trigger skips.
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);

    IF idempotency_keys IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(idempotency_keys) k WHERE k IS NOT NULL) THEN
        -- No keys, nothing to deduplicate: one straight INSERT. Ids are drawn
        -- after the sort by input order, so they grow in input order.
        WITH inserted AS (
            INSERT INTO pgsched.jobs AS j
                (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, tenant, labels)
            SELECT pg_catalog.nextval('pgsched.jobs_id_seq'),
                   pg_catalog.floor(pg_catalog.random() * v_shards)::smallint,
                   CASE WHEN coalesce(u.run_at, v_now) <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
                   coalesce(u.queue, 'default'), u.task, coalesce(u.args, '{}'), coalesce(u.priority, 0),
                   coalesce(u.run_at, v_now), 0, coalesce(u.max_attempts, t.max_attempts, v_default_attempts), u.tenant,
                   CASE WHEN u.labels IS NULL THEN '{}'::text[]
                        ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(u.labels)) END
            FROM unnest(tasks, args, queues, run_ats, priorities, max_attempts, tenants, labels)
                 WITH ORDINALITY AS u(task, args, queue, run_at, priority, max_attempts, tenant, labels, ord)
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
               u.priority, u.key, u.max_attempts, u.tenant, u.labels,
               pg_catalog.nextval('pgsched.jobs_id_seq') AS id
        FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels)
             WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, ord)
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
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, tenant,
             labels)
        SELECT i.id, i.shard,
               CASE WHEN i.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
               i.queue, i.task, coalesce(i.args, '{}'), coalesce(i.priority, 0), i.run_at, 0,
               coalesce(i.max_attempts, t.max_attempts, v_default_attempts), i.key, i.tenant,
               CASE WHEN i.labels IS NULL THEN '{}'::text[]
                    ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(i.labels)) END
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
    -- snapshot sees a concurrent enqueue of the same key that we waited for,
    -- and refuse the batch if it holds other work (PS422, naming the row).
    RETURN QUERY
    SELECT x.o, coalesce(x.id, pgsched._key_holder(x.k, u.task, u.args, x.o))
    FROM unnest(v_ords, v_ids, v_keys) AS x(o, id, k)
    JOIN unnest(tasks, args) WITH ORDINALITY AS u(task, args, n) ON u.n = x.o
    ORDER BY x.o;
END
$$;


-- functions/tg_jobs__before_insert.sql
-- tg_jobs__before_insert
-- contract: every row entering pgsched.jobs, by enqueue() or a plain INSERT,
-- gets its defaults, its validation and its wake-up here, so all paths behave
-- alike. A repeated idempotency key skips the row (INSERT 0 0) and keeps the
-- existing job; enqueue() then returns that job's id. A repeated key with
-- another task or other args raises PS422 (see _key_holder); a refused value
-- raises naming its column and value (see _check_job), not a partition.
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

    PERFORM pgsched._check_job(NEW.task, NEW.queue, NEW.args, NEW.priority, NEW.run_at, NEW.max_attempts,
                               NEW.idempotency_key, NEW.labels, NEW.tenant);
    PERFORM pgsched._check_payload(NEW.args, v_limit);

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
            IF NEW.schedule IS NULL THEN
                PERFORM pgsched._key_holder(NEW.idempotency_key, NEW.task, NEW.args);
            END IF;
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

-- enqueue: batches all or nothing, clear errors (issue 9, points 5 and 7).

-- Idempotency keys are limited to 1000 bytes (was 512 characters, up to 2048
-- bytes), well under the btree limit of the key's index. A stored key longer
-- than 1000 bytes (possible only with multi-byte characters) makes this
-- statement fail, and the upgrade with it, changing nothing.
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_idempotency_key_length;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_idempotency_key_length
    CHECK (pg_catalog.octet_length(idempotency_key) BETWEEN 1 AND 1000);

-- The same names as before, checked with unbounded patterns and a length:
-- a bounded repetition ({0,199}) costs the regex engine some 50 us a row.
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_task_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_task_valid
    CHECK (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' AND pg_catalog.length(task) <= 200);
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_queue_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_queue_valid
    CHECK (queue ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$' AND pg_catalog.length(queue) <= 63);

-- enqueue_many() gained a last parameter, labels jsonb[]: the revision's copy
-- of enqueue_many.sql created it beside the old one, which goes now.
DROP FUNCTION pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[]);
REVOKE EXECUTE ON FUNCTION
    pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[])
    TO pgsched_enqueue;

-- New private helpers: nobody but the functions calls them (as at install).
REVOKE EXECUTE ON FUNCTION
    pgsched._shown(text),
    pgsched._job_problem(text, text, jsonb, integer, timestamptz, integer, text, text[], text),
    pgsched._check_job(text, text, jsonb, integer, timestamptz, integer, text, text[], text, bigint),
    pgsched._key_holder(text, text, jsonb, bigint)
    FROM PUBLIC;
