-- 0017 down: Enqueue stamps its own dispatch order; history keeps the timeout; the insert trigger keys on the row


-- functions/_finish.sql as of the previous revision
-- _finish
-- contract: records a job that was just deleted from pgsched.jobs (by the
-- caller's own fenced DELETE, in the same transaction) as finished: a
-- history row in p_state, the audit events of a job that did not complete
-- (the claim of the attempt it was running, if any, then p_state; a
-- completion is read from the history row), the idempotency key's
-- retention clock started (a service's key is freed at once), and the
-- status event on pgsched_events (when
-- pgsched.config.events is on; payload in docs/events.md, the same as
-- complete()'s); a waiting job's dependency rows dropped, and a dead or
-- cancelled job's dependents cancelled or left waiting by their policy
-- (_fail_dependents). Callers do the check-and-write; this only files.
CREATE OR REPLACE FUNCTION pgsched._finish(
    p_job    pgsched.jobs,
    p_state  pgsched.job_state,
    p_now    timestamptz,
    p_error  text  DEFAULT NULL,
    p_result jsonb DEFAULT NULL,
    p_detail jsonb DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_config pgsched.config;
BEGIN
    SELECT * INTO v_config FROM pgsched.config;
    INSERT INTO pgsched.job_history
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
         leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule,
         service, claimed_at, concurrency_key)
    VALUES (p_job.id, p_job.shard, p_state, p_job.queue, p_job.task, p_job.args, p_job.priority,
            p_job.run_at, p_job.attempt, p_job.max_attempts, p_job.lease_token, p_job.leased_by,
            p_job.idempotency_key, p_job.labels, p_job.tenant, p_job.created_at,
            -- a worker that never called start() (SQL only): the claim is the start;
            -- a job cancelled before its handler started has none
            coalesce(p_job.started_at,
                     CASE WHEN p_job.state = 'running' AND p_state <> 'cancelled' THEN p_job.claimed_at END),
            p_now, p_result, p_error, p_job.schedule, p_job.service, p_job.claimed_at, p_job.concurrency_key);
    IF v_config.events THEN
        PERFORM pg_catalog.pg_notify('pgsched_events', pg_catalog.json_build_object(
            'id', p_job.id, 'queue', p_job.queue, 'task', p_job.task, 'state', p_state,
            'attempt', p_job.attempt)::text);
    END IF;
    IF v_config.audit AND p_state <> 'completed' THEN
        IF p_job.state = 'running' AND p_job.claimed_at IS NOT NULL THEN
            INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
            VALUES (p_job.id, p_job.claimed_at, 'claimed', p_job.attempt, p_job.leased_by, p_job.lease_token);
        END IF;
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        VALUES (p_job.id, p_now, p_state::text, p_job.attempt, p_job.leased_by, p_job.lease_token,
                coalesce(p_detail, CASE WHEN p_error IS NULL THEN NULL ELSE pg_catalog.jsonb_build_object('error', p_error) END));
    END IF;
    -- Dependencies (docs/dependencies.md): a waiting job takes its own rows
    -- with it; a dead or cancelled one applies its dependents' policy.
    IF p_job.state = 'waiting' THEN
        DELETE FROM pgsched.job_dependencies d WHERE d.job = p_job.id;
    END IF;
    IF p_state <> 'completed'
       AND EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = p_job.id AND d.on_failure = 'cancel') THEN
        PERFORM pgsched._fail_dependents(p_job.id, p_state, p_now);
    END IF;
    IF p_job.idempotency_key IS NOT NULL THEN
        UPDATE pgsched.idempotency_keys k
        -- A service's key is free again once it ended: the next enqueue starts it anew.
        SET expires_at = CASE WHEN p_job.service THEN p_now ELSE p_now + v_config.idempotency_retention END
        WHERE k.key = p_job.idempotency_key AND k.job_id = p_job.id;
    END IF;
END
$$;


-- functions/complete.sql as of the previous revision
-- complete
-- contract: finishes the jobs whose fencing token is still current, in one
-- statement: each accepted job leaves pgsched.jobs and enters
-- pgsched.job_history as 'completed' with its result (its claim and
-- completion are read from that row: pgsched.job_timeline; no audit event).
-- A stale token (the lease expired and the job was handed to someone else, or
-- it already finished) changes nothing. Returns one row per input job saying
-- whether it was accepted. Each accepted job sends its status event on
-- pgsched_events when pgsched.config.events is on (docs/events.md). Waiting
-- jobs whose last dependency this completes become due in the same
-- transaction (docs/dependencies.md). shards, when given, lets each lookup go straight
-- to the job's partition.
CREATE OR REPLACE FUNCTION pgsched.complete(
    job_ids bigint[],
    tokens  bigint[],
    results jsonb[]     DEFAULT NULL,
    shards  smallint[]  DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, accepted boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_config pgsched.config;
    v_scope text := pgsched._tenant_scope();
BEGIN
    SELECT * INTO v_config FROM pgsched.config;
    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token, u.result, u.shard
        FROM unnest(complete.job_ids, complete.tokens, complete.results, complete.shards)
             AS u(id, token, result, shard)
        WHERE u.id IS NOT NULL
    ), done AS (
        -- Checks the token and the state in the statement that writes. The
        -- state filter lets the planner read only running rows (a partial
        -- index), however large the backlog.
        DELETE FROM pgsched.jobs j
        USING input u
        WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
          AND (u.shard IS NULL OR j.shard = u.shard)
          AND (v_scope IS NULL OR j.tenant = v_scope)  -- tokens are guessable, tenants are not
        RETURNING j.*, u.result
    ), history AS (
        INSERT INTO pgsched.job_history
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
             leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule,
             service, claimed_at, concurrency_key)
        SELECT d.id, d.shard, 'completed', d.queue, d.task, d.args, d.priority, d.run_at, d.attempt,
               d.max_attempts, d.lease_token, d.leased_by, d.idempotency_key, d.labels, d.tenant,
               -- a worker that never called start() ran it from its claim on
               d.created_at, coalesce(d.started_at, d.claimed_at), v_now, d.result, NULL, d.schedule, d.service,
               d.claimed_at, d.concurrency_key
        FROM done d
    ), keys AS (
        UPDATE pgsched.idempotency_keys k
        SET expires_at = CASE WHEN d.service THEN v_now ELSE v_now + v_config.idempotency_retention END
        FROM done d
        WHERE d.idempotency_key IS NOT NULL AND k.key = d.idempotency_key AND k.job_id = d.id
    ), notified AS (
        -- Same payload as _finish's. Volatile, so materialized: the count
        -- below reads every row, and so sends every NOTIFY.
        SELECT pg_catalog.pg_notify('pgsched_events', pg_catalog.json_build_object(
            'id', d.id, 'queue', d.queue, 'task', d.task, 'state', 'completed', 'attempt', d.attempt)::text)
        FROM done d
        WHERE v_config.events
    )
    SELECT u.id, d.id IS NOT NULL
    FROM input u
    LEFT JOIN done d ON d.id = u.id
    CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) n;
    -- Dependents of what completed become due in this transaction; without
    -- any, one index probe. A statement of its own (see _release_dependents).
    IF EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = ANY (complete.job_ids)) THEN
        PERFORM pgsched._release_dependents(complete.job_ids, v_now);
    END IF;
END
$$;


-- functions/enqueue.sql as of the previous revision
-- enqueue
-- contract: adds one job and returns its id. For an idempotency key already
-- held by an active job, or by a finished one within the retention window,
-- returns that job's id and adds nothing (keys are per tenant), provided the
-- task and args are the same (else PS422, see _key_holder). The shard derives from the key when
-- there is one (so a key always lands on the same shard), else it is random.
-- A refused value raises with its column named (see _check_job). timeout:
-- the time limit of each run (NULL: the task's, else none), see start().
-- With depends_on (job ids), the job waits (state 'waiting') until every
-- dependency completed; on_dependency_failure ('cancel' or 'wait') says what
-- a dependency ending dead or cancelled does to it (see _depend).
-- trace_context: the caller's trace propagation headers (see docs/otel.md).
-- concurrency_key (e.g. 'customer:42') is what the queue's per-key limits
-- count (docs/dispatch.md).
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
    tenant          text        DEFAULT NULL,
    timeout         interval    DEFAULT NULL,
    depends_on      bigint[]    DEFAULT NULL,
    on_dependency_failure text  DEFAULT 'cancel',
    trace_context   jsonb       DEFAULT NULL,
    concurrency_key text        DEFAULT NULL
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
    v_waits boolean := coalesce(pg_catalog.cardinality(enqueue.depends_on), 0) > 0;
BEGIN
    PERFORM pgsched._check_tenant(enqueue.tenant);
    PERFORM pgsched._check_command_task(enqueue.task, 'enqueue()');
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    PERFORM pgsched._check_job(enqueue.task, v_queue, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0),
                               v_run_at, v_max, enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant);
    PERFORM pgsched._check_payload(enqueue.args, v_limit);
    IF enqueue.timeout IS NOT NULL OR enqueue.concurrency_key IS NOT NULL THEN
        PERFORM pgsched._check_run_options(enqueue.timeout, enqueue.concurrency_key);
    END IF;
    IF enqueue.on_dependency_failure IS NOT NULL AND enqueue.on_dependency_failure NOT IN ('cancel', 'wait') THEN
        PERFORM pgsched._depend('{}', '{}', '{}', ARRAY[enqueue.on_dependency_failure], v_now, false);
    END IF;
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
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        VALUES (enqueue.idempotency_key, enqueue.tenant, v_id, v_shard, v_now)
        ON CONFLICT ON CONSTRAINT idempotency_keys_key_tenant DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now;
        IF NOT FOUND THEN
            -- A new statement: its snapshot sees the holder we waited for.
            RETURN pgsched._key_holder(enqueue.idempotency_key, enqueue.task, enqueue.args, NULL, enqueue.tenant);
        END IF;
    END IF;

    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);
    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant,
         timeout, trace_context, concurrency_key)
    VALUES (v_id, v_shard,
            CASE WHEN v_waits THEN 'waiting' WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, enqueue.task, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0), v_run_at, 0, v_max,
            enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant, enqueue.timeout,
            enqueue.trace_context, enqueue.concurrency_key);
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

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


-- functions/enqueue_command.sql as of the previous revision
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
-- timeout_s} and the label pgsched:command, which only --commands workers
-- offer, so no other worker ever claims it. With a timeout, the job's
-- timeout column is timeout + config.command_timeout_margin: the runner
-- kills the program at timeout and records its output within the margin,
-- so the worker's own time limit and the database's deadline (start(),
-- _fail_overdue) fire only when the runner itself failed to end the run.
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
    tenant          text        DEFAULT NULL
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
BEGIN
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

    v_labels := coalesce(enqueue_command.labels, '{}');
    IF NOT 'pgsched:command' = ANY (v_labels) THEN
        v_labels := v_labels || 'pgsched:command'::text;
    END IF;
    v_args := pg_catalog.jsonb_build_object(
        'argv', pg_catalog.to_jsonb(argv), 'env', v_env, 'cwd', cwd,
        'timeout_s', pg_catalog.date_part('epoch', enqueue_command.timeout));
    SELECT c.max_payload_bytes, coalesce(v_max, t.max_attempts, c.default_max_attempts), c.command_timeout_margin
    INTO v_limit, v_max, v_margin
    FROM pgsched.config c LEFT JOIN pgsched.tasks t ON t.name = 'pgsched.command';
    PERFORM pgsched._check_job('pgsched.command', v_queue, v_args, coalesce(enqueue_command.priority, 0), v_run_at,
                               v_max, enqueue_command.idempotency_key, v_labels, enqueue_command.tenant);
    PERFORM pgsched._check_payload(v_args, v_limit);

    IF enqueue_command.idempotency_key IS NULL THEN
        v_shard := pgsched._random_shard();
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

    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);
    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant,
         timeout)
    VALUES (v_id, v_shard, CASE WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, 'pgsched.command', v_args, coalesce(enqueue_command.priority, 0), v_run_at, 0, v_max,
            enqueue_command.idempotency_key, v_labels, enqueue_command.tenant, enqueue_command.timeout + v_margin);
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);
    PERFORM pg_catalog.pg_notify(CASE WHEN v_run_at <= v_now THEN 'pgsched_jobs' ELSE 'pgsched_scheduled' END,
                                 CASE WHEN v_run_at <= v_now THEN v_queue ELSE '' END);
    RETURN v_id;
END
$$;


-- functions/enqueue_many.sql as of the previous revision
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
-- in enqueue().
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
    concurrency_keys text[]        DEFAULT NULL
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
    v_tenants text[];
    v_queues text[];
    v_scheduled boolean;
    v_n integer := pg_catalog.cardinality(tasks);
    v_bad record;
    v_shard_list smallint[];
    v_final bigint[];
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
                  pg_catalog.array_ndims(concurrency_keys))) AS a(name, len, dims)
    WHERE a.len IS NOT NULL AND (a.len <> v_n OR a.dims > 1)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: enqueue_many: % has % elements%, tasks has %: every array given must have one element per job (or be NULL for all defaults)',
                v_bad.name, v_bad.len, CASE WHEN v_bad.dims > 1 THEN pg_catalog.format(' in %s dimensions', v_bad.dims) ELSE '' END, v_n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pgsched._check_command_task(u.task, pg_catalog.format('enqueue_many() row %s', u.ord))
    FROM unnest(tasks) WITH ORDINALITY AS u(task, ord)
    WHERE u.task = 'pgsched.command';
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
    IF timeouts IS NOT NULL OR concurrency_keys IS NOT NULL THEN
        PERFORM pgsched._check_run_options(u.timeout, u.ckey, u.ord)
        FROM unnest(timeouts, concurrency_keys) WITH ORDINALITY AS u(timeout, ckey, ord)
        WHERE u.timeout <= interval '0' OR pg_catalog.length(u.ckey) NOT BETWEEN 1 AND 200;
    END IF;

    -- Set-based, the work the insert trigger does row by row for a plain
    -- INSERT; the rows then go in as a trusted writer the trigger skips.
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);

    IF idempotency_keys IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(idempotency_keys) k WHERE k IS NOT NULL) THEN
        -- No keys, nothing to deduplicate: one straight INSERT. Ids are drawn
        -- after the sort by input order, so they grow in input order.
        WITH inserted AS (
            INSERT INTO pgsched.jobs AS j
                (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, tenant, labels,
                 trace_context, timeout, concurrency_key)
            SELECT pg_catalog.nextval('pgsched.jobs_id_seq'),
                   pg_catalog.floor(pg_catalog.random() * v_shards)::smallint,
                   CASE WHEN pg_catalog.jsonb_typeof(u.deps) <> 'array' OR pg_catalog.jsonb_array_length(u.deps) > 0
                        THEN 'waiting'
                        WHEN coalesce(u.run_at, v_now) <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
                   coalesce(u.queue, 'default'), u.task, coalesce(u.args, '{}'), coalesce(u.priority, 0),
                   coalesce(u.run_at, v_now), 0, coalesce(u.max_attempts, t.max_attempts, v_default_attempts), u.tenant,
                   CASE WHEN u.labels IS NULL THEN '{}'::text[]
                        ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(u.labels)) END,
                   enqueue_many.trace_context, u.timeout, u.ckey
            FROM unnest(tasks, args, queues, run_ats, priorities, max_attempts, tenants, labels, depends_on, timeouts,
                        concurrency_keys)
                 WITH ORDINALITY AS u(task, args, queue, run_at, priority, max_attempts, tenant, labels, deps, timeout,
                                      ckey, ord)
            LEFT JOIN pgsched.tasks t ON t.name = u.task
            ORDER BY u.ord
            RETURNING j.id, j.shard, j.queue, j.state
        )
        SELECT pg_catalog.array_agg(i.id ORDER BY i.id), pg_catalog.array_agg(i.shard ORDER BY i.id),
               pg_catalog.array_agg(DISTINCT i.queue) FILTER (WHERE i.state = 'available'),
               pg_catalog.bool_or(i.state = 'scheduled')
        INTO v_ids, v_shard_list, v_queues, v_scheduled
        FROM inserted i;
        PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);
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
               u.priority, u.key, u.max_attempts, u.tenant, u.labels, u.deps, u.timeout, u.ckey,
               pg_catalog.nextval('pgsched.jobs_id_seq') AS id
        FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels, depends_on,
                    timeouts, concurrency_keys)
             WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, deps, timeout,
                                  ckey, ord)
    ), input AS MATERIALIZED (
        SELECT n.*,
               CASE WHEN n.key IS NULL THEN pg_catalog.floor(pg_catalog.random() * v_shards)::smallint
                    ELSE ((pg_catalog.hashtextextended(n.key, 0) % v_shards + v_shards) % v_shards)::smallint
               END AS shard,
               -- only the first row of a key in this batch is inserted
               n.key IS NULL OR n.ord = pg_catalog.min(n.ord) OVER (PARTITION BY n.key, n.tenant) AS first_of_key
        FROM numbered n
    ), taken AS (
        -- Keys are taken in key order, so concurrent batches sharing keys
        -- wait for each other instead of deadlocking. A key whose retention
        -- ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        SELECT i.key, i.tenant, i.id, i.shard, v_now
        FROM input i
        WHERE i.key IS NOT NULL AND i.first_of_key
        ORDER BY i.key
        ON CONFLICT (key, tenant) DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now
        RETURNING k.job_id
    ), inserted AS (
        INSERT INTO pgsched.jobs AS j
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, tenant,
             labels, trace_context, timeout, concurrency_key)
        SELECT i.id, i.shard,
               CASE WHEN pg_catalog.jsonb_typeof(i.deps) <> 'array' OR pg_catalog.jsonb_array_length(i.deps) > 0
                    THEN 'waiting'
                    WHEN i.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
               i.queue, i.task, coalesce(i.args, '{}'), coalesce(i.priority, 0), i.run_at, 0,
               coalesce(i.max_attempts, t.max_attempts, v_default_attempts), i.key, i.tenant,
               CASE WHEN i.labels IS NULL THEN '{}'::text[]
                    ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(i.labels)) END,
               enqueue_many.trace_context, i.timeout, i.ckey
        FROM input i
        LEFT JOIN pgsched.tasks t ON t.name = i.task
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
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

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


-- functions/enqueue_service.sql as of the previous revision
-- enqueue_service
-- contract: enqueue() for a service job (jobs.service): one that runs until
-- it is cancelled, has no timeout, and is started again on another worker
-- when its worker dies (its lease expires; expiries never send it dead,
-- see expire_leases). With an idempotency key, at most one such job is
-- alive per key: a repeat while it is active returns its id and adds
-- nothing; once it ended (cancelled, dead, or returned), the key is free
-- and the next call starts a new one. Same parameters and checks as
-- enqueue(); a plain INSERT INTO pgsched.jobs (..., service) VALUES (...,
-- true) does the same without returning the holder of a repeated key.
CREATE OR REPLACE FUNCTION pgsched.enqueue_service(
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
    v_run_at timestamptz := coalesce(enqueue_service.run_at, pg_catalog.now());
    v_queue text := coalesce(enqueue_service.queue, 'default');
    v_args jsonb := coalesce(enqueue_service.args, '{}');
    v_limit integer;
    v_max integer := enqueue_service.max_attempts;
    v_id bigint := pg_catalog.nextval('pgsched.jobs_id_seq');
    v_shard smallint;
BEGIN
    PERFORM pgsched._check_tenant(enqueue_service.tenant);
    PERFORM pgsched._check_command_task(enqueue_service.task, 'enqueue_service()');
    PERFORM pgsched._check_job(enqueue_service.task, v_queue, v_args, coalesce(enqueue_service.priority, 0), v_run_at,
                               v_max, enqueue_service.idempotency_key, coalesce(enqueue_service.labels, '{}'),
                               enqueue_service.tenant);
    SELECT c.max_payload_bytes, coalesce(v_max, t.max_attempts, c.default_max_attempts)
    INTO v_limit, v_max
    FROM pgsched.config c LEFT JOIN pgsched.tasks t ON t.name = enqueue_service.task;
    PERFORM pgsched._check_payload(v_args, v_limit);

    IF enqueue_service.idempotency_key IS NULL THEN
        v_shard := pgsched._random_shard();
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

    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);
    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant,
         service)
    VALUES (v_id, v_shard, CASE WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, enqueue_service.task, v_args, coalesce(enqueue_service.priority, 0), v_run_at, 0, v_max,
            enqueue_service.idempotency_key, coalesce(enqueue_service.labels, '{}'), enqueue_service.tenant, true);
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);
    PERFORM pg_catalog.pg_notify(CASE WHEN v_run_at <= v_now THEN 'pgsched_jobs' ELSE 'pgsched_scheduled' END,
                                 CASE WHEN v_run_at <= v_now THEN v_queue ELSE '' END);
    RETURN v_id;
END
$$;


-- functions/retry.sql as of the previous revision
-- retry
-- contract: re-enqueues (redrives) a dead or cancelled job under its own id,
-- due now, with a fresh attempt budget (the task's max_attempts, else the
-- install default) on top of the attempts it used: the attempt counter keeps
-- growing across redrives. Its history rows stay. Returns
-- 'retried', 'active' (the job is queued or running already),
-- 'not_retryable' (it completed) or 'not_found' (also for a job of another
-- tenant when the session is confined to one, see _check_tenant). A command
-- job gets its deadline again: timeout = its args' timeout_s +
-- config.command_timeout_margin (as enqueue_command sets it).
CREATE OR REPLACE FUNCTION pgsched.retry(
    job_id bigint,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_last pgsched.job_history;
    v_id bigint;
    v_tenant text;
BEGIN
    -- This function bypasses row-level security, so it confines tenants itself.
    SELECT t.tenant INTO v_tenant
    FROM (SELECT j.tenant FROM pgsched.jobs j WHERE j.id = retry.job_id
          UNION ALL
          SELECT h.tenant FROM pgsched.job_history h WHERE h.id = retry.job_id) t
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            PERFORM pgsched._check_tenant(v_tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN 'not_found';
        END;
    END IF;

    -- An enqueue that is making a job depend on this one finishes first (see _depend).
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgsched.depend'), pg_catalog.hashint8(retry.job_id));
    IF EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = retry.job_id) THEN
        RETURN 'active';
    END IF;
    SELECT * INTO v_last
    FROM pgsched.job_history h
    WHERE h.id = retry.job_id
    ORDER BY h.finished_at DESC
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF v_last.state = 'completed' THEN
        RETURN 'not_retryable';
    END IF;

    -- The primary key (id, shard) makes a concurrent second redrive a no-op.
    INSERT INTO pgsched.jobs AS j
        (id, shard, queue, task, args, priority, run_at, idempotency_key, labels, tenant, created_at, service,
         concurrency_key, timeout)
    VALUES (v_last.id, v_last.shard, v_last.queue, v_last.task, v_last.args, v_last.priority, v_now,
            v_last.idempotency_key, v_last.labels, v_last.tenant, v_last.created_at, v_last.service,
            v_last.concurrency_key,
            CASE WHEN v_last.task = 'pgsched.command' AND pg_catalog.jsonb_typeof(v_last.args -> 'timeout_s') = 'number'
                      AND (v_last.args ->> 'timeout_s')::double precision > 0
                 THEN pg_catalog.make_interval(secs => (v_last.args ->> 'timeout_s')::double precision)
                      + (SELECT c.command_timeout_margin FROM pgsched.config c) END)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO v_id;
    IF v_id IS NULL THEN
        RETURN 'active';
    END IF;
    -- The insert trigger starts every job at attempt 0; carry the count on.
    UPDATE pgsched.jobs j
    SET attempt = v_last.attempt,
        max_attempts = least(v_last.attempt::bigint + j.max_attempts, 1000000)::integer
    WHERE j.id = v_id AND j.shard = v_last.shard;
    PERFORM pgsched._event(v_id, v_now, 'retried', v_last.attempt, NULL, NULL,
        pg_catalog.jsonb_build_object('previous_state', v_last.state));
    RETURN 'retried';
END
$$;


-- functions/tg_jobs__dispatch.sql as of the previous revision
-- tg_jobs__dispatch
-- contract: stamps a job's place in the claim order from its queue's policy
-- whenever the row is written or its run_at, priority, queue or tenant
-- changes (never by a sweep of waiting rows): dispatch_at = run_at under
-- strict priority (dispatch_rank = -priority), or run_at - priority x aging
-- under aging (dispatch_rank = 0), so a job due at run_at with priority p
-- passes a job of priority q due (q - p) x aging later: one priority step per
-- aging interval waited, fixed once, read by one index scan. Under tenant
-- fairness dispatch_group is the tenant, so claims can take turns between
-- tenants (see _claim_limited). A new job without labels gets its task's
-- default labels, else its queue's (worker pools, docs/dispatch.md).
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__dispatch()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_aging interval;
    v_fair boolean;
    v_labels text[];
    v_task_labels text[];
BEGIN
    SELECT q.aging, q.tenant_fairness, q.labels INTO v_aging, v_fair, v_labels
    FROM pgsched.queues q WHERE q.name = NEW.queue;
    IF TG_OP = 'INSERT' AND NEW.labels = '{}' THEN
        SELECT t.labels INTO v_task_labels FROM pgsched.tasks t WHERE t.name = NEW.task;
        NEW.labels := coalesce(v_task_labels, v_labels, '{}');
    END IF;
    NEW.dispatch_group := CASE WHEN v_fair THEN coalesce(NEW.tenant, '') ELSE '' END;
    IF v_aging IS NULL THEN
        NEW.dispatch_rank := -NEW.priority;
        NEW.dispatch_at := NEW.run_at;
    ELSE
        -- |priority| <= 1e6 and aging <= 1 day: at most 2738 years either way.
        NEW.dispatch_rank := 0;
        NEW.dispatch_at := NEW.run_at - NEW.priority * v_aging;
    END IF;
    RETURN NEW;
END
$$;

-- 30_triggers.sql as of the previous revision: one dispatch trigger for inserts and updates,
-- the owner's insert trigger keyed on the session mark.
DROP TRIGGER tg_jobs__redispatch ON pgsched.jobs;
DROP TRIGGER tg_jobs__dispatch ON pgsched.jobs;
CREATE TRIGGER tg_jobs__dispatch
    BEFORE INSERT OR UPDATE OF run_at, priority, queue, tenant ON pgsched.jobs
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_jobs__dispatch();
DO $$
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__before_insert
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER <> %L)
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('untrusted')
        $sql$, current_user);
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__before_insert_owner
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER = %L
                  AND pg_catalog.current_setting('pgsched.trusted_insert', true) IS DISTINCT FROM 'on')
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('owner')
        $sql$, current_user);
END
$$;

-- 10_tables.sql as of the previous revision
ALTER TABLE pgsched.jobs
    ALTER COLUMN attempt SET DEFAULT 0,
    ALTER COLUMN dispatch_group SET DEFAULT '',
    ALTER COLUMN dispatch_rank SET DEFAULT 0,
    ALTER COLUMN dispatch_at SET DEFAULT pg_catalog.now();
ALTER TABLE pgsched.job_history DROP COLUMN timeout;
