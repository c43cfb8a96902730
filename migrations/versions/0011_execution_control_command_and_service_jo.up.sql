-- 0011: execution control, command and service jobs, dependencies, tracing

-- Signatures that change: enqueue (timeout, depends_on, on_dependency_failure,
-- trace_context), enqueue_many (depends_on, on_dependency_failure,
-- trace_context), start (returns the run's timeout), claim (returns
-- trace_context), fail (a result). Dropped first; created anew below.
DROP FUNCTION pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text);
DROP FUNCTION pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[]);
DROP FUNCTION pgsched.start(bigint[], bigint[], smallint[], timestamptz);
DROP FUNCTION pgsched.claim(text, text[], integer, interval, text[], integer, timestamptz);
DROP FUNCTION pgsched.fail(bigint, bigint, text, timestamptz, boolean, timestamptz);

-- The role that may enqueue command jobs (cluster-wide: only when missing).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_command') THEN
        CREATE ROLE pgsched_command NOLOGIN;
    END IF;
END
$$;

-- The new state. A value added in a transaction cannot be used in it: the
-- CHECK constraint and queue_stats compare it as text, and the functions
-- that name it are PL/pgSQL (parsed when they first run).
ALTER TYPE pgsched.job_state ADD VALUE IF NOT EXISTS 'waiting' AFTER 'scheduled';

ALTER TABLE pgsched.config
    ADD COLUMN timeout_grace interval NOT NULL DEFAULT '5 seconds',
    ADD COLUMN max_handbacks integer NOT NULL DEFAULT 3,
    ADD CONSTRAINT config_timeout_grace_range CHECK (timeout_grace BETWEEN interval '0' AND interval '1 day'),
    ADD CONSTRAINT config_max_handbacks_range CHECK (max_handbacks BETWEEN 0 AND 1000000);

ALTER TABLE pgsched.jobs
    ADD COLUMN timeout interval,
    ADD COLUMN deadline_at timestamptz,
    ADD COLUMN handbacks integer NOT NULL DEFAULT 0,
    ADD COLUMN service boolean NOT NULL DEFAULT false,
    ADD COLUMN trace_context jsonb,
    ADD CONSTRAINT jobs_timeout_positive CHECK (timeout > interval '0'),
    ADD CONSTRAINT jobs_trace_context_valid CHECK (
        pg_catalog.jsonb_typeof(trace_context) = 'object' AND pg_catalog.octet_length(trace_context::text) <= 8192);
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_state_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_state_valid CHECK (CASE state
        WHEN 'running' THEN lease_token IS NOT NULL AND leased_by IS NOT NULL AND lease_expires_at IS NOT NULL
        WHEN 'available' THEN lease_token IS NULL
        WHEN 'scheduled' THEN lease_token IS NULL
        -- compared as text: an enum value cannot be used in the transaction that adds it (a migration)
        ELSE state::text = 'waiting' AND lease_token IS NULL END);
COMMENT ON TABLE pgsched.jobs IS
    'Active jobs (scheduled, waiting, available, running), one partition per shard. Plain INSERT with task and args works; everything else goes through functions.';
COMMENT ON COLUMN pgsched.jobs.timeout IS
    'Time limit of each run (plain INSERT may set it); past deadline_at plus config.timeout_grace, housekeeping fails the run.';
COMMENT ON COLUMN pgsched.jobs.service IS
    'A service job: runs until cancelled, restarted elsewhere when its lease expires (never dead by expiries).';
COMMENT ON COLUMN pgsched.jobs.trace_context IS
    'Trace propagation headers current at enqueue (a JSON object of strings, e.g. traceparent); the run continues that trace.';

ALTER TABLE pgsched.job_history ADD COLUMN service boolean NOT NULL DEFAULT false;

ALTER TABLE pgsched.tasks
    ADD COLUMN timeout interval,
    ADD CONSTRAINT tasks_timeout_positive CHECK (timeout > interval '0');

CREATE TABLE pgsched.job_dependencies (
    depends_on bigint   NOT NULL,
    job        bigint   NOT NULL,
    job_shard  smallint NOT NULL,
    on_failure text     NOT NULL DEFAULT 'cancel',
    CONSTRAINT job_dependencies_pkey PRIMARY KEY (depends_on, job),
    CONSTRAINT job_dependencies_on_failure_valid CHECK (on_failure IN ('cancel', 'wait'))
);
COMMENT ON TABLE pgsched.job_dependencies IS
    'Unmet dependencies of waiting jobs (job waits for depends_on); written by enqueue and the functions that finish jobs.';
CREATE INDEX job_dependencies_job_idx ON pgsched.job_dependencies (job);
ALTER TABLE pgsched.job_dependencies ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_dependencies_unscoped ON pgsched.job_dependencies
    USING ((SELECT pgsched._tenant_scope()) IS NULL);



-- functions/_check_command_task.sql
-- _check_command_task
-- contract: raises insufficient_privilege when p_task is pgsched.command, the
-- task of command jobs: those enter only through enqueue_command() (granted
-- by pgsched_command), never through enqueue(), enqueue_many(), a plain
-- INSERT or a schedule, whatever the caller's other grants. p_where names
-- the path that was refused (with its batch row, if any) in the message.
-- The owner's own redrive (retry()) re-inserts an existing command job and
-- does not come here.
CREATE OR REPLACE FUNCTION pgsched._check_command_task(p_task text, p_where text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_task = 'pgsched.command' THEN
        RAISE EXCEPTION 'pgsched: %task pgsched.command is reserved for command jobs',
                CASE WHEN p_where IS NULL THEN '' ELSE p_where || ': ' END
            USING ERRCODE = 'insufficient_privilege', COLUMN = 'task', SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'Enqueue commands with pgsched.enqueue_command(), which needs the role pgsched_command.';
    END IF;
END
$$;


-- functions/_depend.sql
-- _depend
-- contract: gives the just-inserted waiting jobs p_ids (on p_shards) their
-- dependencies: p_deps[i] is a JSON array of job ids, and in a batch also of
-- references to earlier rows of it as negative 1-based positions (-1: the
-- first row); p_policies[i] ('cancel', the default, or 'wait') says what a
-- dead or cancelled dependency does to job i. A dependency still active is
-- held (FOR KEY SHARE: it cannot finish before this transaction commits)
-- and becomes a row of pgsched.job_dependencies; one that completed
-- (history) is met; one dead or cancelled applies the policy at once
-- ('cancel': the job is filed cancelled; 'wait': it waits for a redrive).
-- A job with nothing left to wait for is made due (_release). A bad
-- element, a reference to the row itself or a later one, or an id this
-- session cannot see (another tenant's, or none) raises naming the row
-- (p_batch) and the value; the caller's insert is rolled back with it.
CREATE OR REPLACE FUNCTION pgsched._depend(
    p_ids      bigint[],
    p_shards   smallint[],
    p_deps     jsonb[],
    p_policies text[],
    p_now      timestamptz,
    p_batch    boolean DEFAULT true
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_bad record;
    v_row text := '';
    v_ords bigint[];
    v_jobs bigint[];
    v_job_shards smallint[];
    v_on_failure text[];
    v_on bigint[];
    v_active bigint[];
    v_failed bigint[];
    v_failed_states text[];
    v_outside bigint[];
    v_met bigint[];
    v_job pgsched.jobs;
BEGIN
    SELECT u.ord, u.deps, u.policy, e.v,
           CASE WHEN u.policy IS NOT NULL AND u.policy NOT IN ('cancel', 'wait') THEN 'policy'
                WHEN pg_catalog.jsonb_typeof(u.deps) <> 'array' THEN 'shape'
                WHEN pg_catalog.jsonb_typeof(e.v) <> 'number' OR e.v::numeric <> pg_catalog.trunc(e.v::numeric)
                     OR e.v::numeric = 0 OR e.v::numeric > 9223372036854775807 THEN 'element'
                WHEN e.v::numeric < 0 AND (NOT p_batch OR -e.v::numeric >= u.ord) THEN 'reference'
           END AS problem
    INTO v_bad
    FROM unnest(p_deps, p_policies) WITH ORDINALITY AS u(deps, policy, ord)
    LEFT JOIN LATERAL pg_catalog.jsonb_array_elements(
        CASE WHEN pg_catalog.jsonb_typeof(u.deps) = 'array' THEN u.deps END) AS e(v) ON true
    WHERE (u.policy IS NOT NULL AND u.policy NOT IN ('cancel', 'wait'))
       OR pg_catalog.jsonb_typeof(u.deps) <> 'array'
       OR pg_catalog.jsonb_typeof(e.v) <> 'number'
       OR e.v::numeric <> pg_catalog.trunc(e.v::numeric) OR e.v::numeric = 0
       OR e.v::numeric > 9223372036854775807
       OR (e.v::numeric < 0 AND (NOT p_batch OR -e.v::numeric >= u.ord))
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        IF p_batch THEN
            v_row := pg_catalog.format('row %s of the batch: ', v_bad.ord);
        END IF;
        IF v_bad.problem = 'policy' THEN
            RAISE EXCEPTION 'pgsched: %on_dependency_failure must be ''cancel'' or ''wait'', not %',
                    v_row, pgsched._shown(v_bad.policy)
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'on_dependency_failure';
        ELSIF v_bad.problem = 'reference' AND p_batch THEN
            RAISE EXCEPTION 'pgsched: %depends_on % refers to row %, which does not come before it: a batch''s references point back (-1 is its first row)',
                    v_row, v_bad.v, -v_bad.v::numeric
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on';
        ELSIF v_bad.problem = 'reference' THEN
            RAISE EXCEPTION 'pgsched: depends_on %: no such job (job ids are positive)', v_bad.v
                USING ERRCODE = 'foreign_key_violation', COLUMN = 'depends_on';
        END IF;
        RAISE EXCEPTION 'pgsched: %depends_on must be a JSON array of job ids%, not %', v_row,
                CASE WHEN p_batch THEN ' (or -n for the n-th row of the batch)' ELSE '' END,
                pgsched._shown(v_bad.deps::text)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on';
    END IF;

    -- One edge per (job, dependency), references resolved to the ids drawn.
    -- A reference to a row this call inserted (it has a shard) is active by
    -- construction, and no one else sees it yet: only the others are looked up.
    SELECT pg_catalog.array_agg(x.ord ORDER BY x.job, x.dep), pg_catalog.array_agg(x.job ORDER BY x.job, x.dep),
           pg_catalog.array_agg(x.shard ORDER BY x.job, x.dep), pg_catalog.array_agg(x.policy ORDER BY x.job, x.dep),
           pg_catalog.array_agg(x.dep ORDER BY x.job, x.dep),
           pg_catalog.array_agg(DISTINCT x.dep) FILTER (WHERE NOT x.internal)
    INTO v_ords, v_jobs, v_job_shards, v_on_failure, v_on, v_outside
    FROM (SELECT DISTINCT u.ord, u.id AS job, u.shard, coalesce(u.policy, 'cancel') AS policy,
                 CASE WHEN e.v::numeric > 0 THEN e.v::numeric::bigint ELSE p_ids[(-e.v::numeric)::integer] END AS dep,
                 e.v::numeric < 0 AND p_shards[(-e.v::numeric)::integer] IS NOT NULL AS internal
          FROM unnest(p_ids, p_shards, p_deps, p_policies) WITH ORDINALITY AS u(id, shard, deps, policy, ord)
          CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(u.deps) AS e(v)) x;
    IF v_jobs IS NULL THEN
        RETURN;
    END IF;

    IF v_outside IS NOT NULL THEN
        -- Active dependencies, held until commit so none finishes unseen.
        SELECT pg_catalog.array_agg(s.id) INTO v_active
        FROM (SELECT j.id FROM pgsched.jobs j
              WHERE j.id = ANY (v_outside) AND pgsched._tenant_visible(j.tenant)
              ORDER BY j.id
              FOR KEY SHARE OF j) s;
        -- The others, from history (a new snapshot: one that finished while
        -- we waited for its row is there). The latest outcome counts.
        SELECT pg_catalog.array_agg(h.id) FILTER (WHERE h.state <> 'completed'),
               pg_catalog.array_agg(h.state::text) FILTER (WHERE h.state <> 'completed'),
               pg_catalog.array_agg(h.id) FILTER (WHERE h.state = 'completed')
        INTO v_failed, v_failed_states, v_met
        FROM (SELECT DISTINCT ON (h.id) h.id, h.state
              FROM pgsched.job_history h
              WHERE h.id = ANY (ARRAY(SELECT o.id FROM unnest(v_outside) AS o(id)
                                      WHERE NOT EXISTS (SELECT 1 FROM unnest(v_active) AS a(id) WHERE a.id = o.id)))
                AND pgsched._tenant_visible(h.tenant)
              ORDER BY h.id, h.finished_at DESC) h;

        SELECT e.ord, e.dep INTO v_bad
        FROM unnest(v_ords, v_on) AS e(ord, dep)
        WHERE e.dep = ANY (v_outside)
          AND NOT EXISTS (SELECT 1 FROM unnest(v_active) AS a(id) WHERE a.id = e.dep)
          AND NOT EXISTS (SELECT 1 FROM unnest(v_failed) AS f(id) WHERE f.id = e.dep)
          AND NOT EXISTS (SELECT 1 FROM unnest(v_met) AS m(id) WHERE m.id = e.dep)
        ORDER BY e.ord
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgsched: %depends_on %: no such job',
                    CASE WHEN p_batch THEN pg_catalog.format('row %s of the batch: ', v_bad.ord) ELSE '' END, v_bad.dep
                USING ERRCODE = 'foreign_key_violation', COLUMN = 'depends_on',
                      HINT = 'A job can depend on jobs this session can see, active or in the history.';
        END IF;
    END IF;

    -- Rows for every dependency not met: active ones, and failed ones a job waits out.
    INSERT INTO pgsched.job_dependencies (depends_on, job, job_shard, on_failure)
    SELECT e.dep, e.job, e.shard, e.policy
    FROM unnest(v_on, v_jobs, v_job_shards, v_on_failure) AS e(dep, job, shard, policy)
    WHERE NOT EXISTS (SELECT 1 FROM unnest(v_met) AS m(id) WHERE m.id = e.dep)
      AND (e.policy = 'wait' OR NOT EXISTS (SELECT 1 FROM unnest(v_failed) AS f(id) WHERE f.id = e.dep));

    -- A dependency already dead or cancelled: the policy, at once.
    FOR v_bad IN
        SELECT DISTINCT ON (e.job) e.job, e.shard, f.id AS dep, f.state
        FROM unnest(v_on, v_jobs, v_job_shards, v_on_failure) AS e(dep, job, shard, policy)
        JOIN unnest(v_failed, v_failed_states) AS f(id, state) ON f.id = e.dep
        WHERE e.policy = 'cancel'
        ORDER BY e.job, f.id
    LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = v_bad.job AND j.shard = v_bad.shard AND j.state = 'waiting'
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._finish(v_job, 'cancelled', p_now, pg_catalog.format('dependency %s %s', v_bad.dep, v_bad.state));
        END IF;
    END LOOP;

    PERFORM pgsched._release(ARRAY(SELECT DISTINCT pg_catalog.unnest(v_jobs) ORDER BY 1),
                             ARRAY(SELECT s FROM (SELECT DISTINCT ON (e.job) e.job, e.shard AS s
                                                  FROM unnest(v_jobs, v_job_shards) AS e(job, shard)
                                                  ORDER BY e.job) t), p_now);
END
$$;


-- functions/_fail_overdue.sql
-- _fail_overdue
-- contract: fails the running jobs whose run is past its deadline
-- (deadline_at, set by start() from the job's or the task's timeout) plus
-- pgsched.config.timeout_grace, whatever their heartbeats say: each through
-- pgsched.fail() under its current token, with the error 'timed out after N s',
-- so its retry policy decides (retry with backoff, or dead) and the token is
-- spent: the hung worker's late complete(), fail() or heartbeat() is refused.
-- Returns the number of jobs failed (at most p_limit). expire_leases calls it,
-- so scanners and housekeeping workers both enforce deadlines.
--
-- Only started runs count (started_at is set by start() and cleared by every
-- claim, so a deadline_at left from an earlier run never applies). Candidates
-- are locked with SKIP LOCKED: a completion in flight wins, and fail() checks
-- the token again.
CREATE OR REPLACE FUNCTION pgsched._fail_overdue(
    p_now   timestamptz,
    p_limit integer,
    p_shard integer
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
    v_grace interval;
    v_job record;
    v_count integer := 0;
BEGIN
    SELECT c.timeout_grace INTO v_grace FROM pgsched.config c;
    FOR v_job IN
        SELECT j.id, j.shard, j.lease_token, j.deadline_at - j.started_at AS timeout
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.started_at IS NOT NULL AND j.deadline_at < v_now - v_grace
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        IF pgsched.fail(v_job.id, v_job.lease_token,
                        pg_catalog.format('timed out after %s s',
                            pg_catalog.round(EXTRACT(epoch FROM v_job.timeout), 3)::double precision),
                        NULL, false, p_now) <> 'lease_lost' THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END
$$;


-- functions/_fail_dependents.sql
-- _fail_dependents
-- contract: a job (p_id) just ended p_state ('dead' or 'cancelled'): every
-- waiting job that depends on it with policy 'cancel' is cancelled, with the
-- error 'dependency <id> <state>', and so on down the graph (their own
-- dependents see 'dependency <id> cancelled'); dependents with policy 'wait'
-- stay waiting, their dependency row kept, until a redrive of the job
-- (pgsched.retry) completes. _finish calls it; each job cancelled here is
-- filed by _finish too, which drops that job's own dependency rows.
--
-- The whole graph below is found first (a recursive query), and the rows
-- that led to it are deleted before the jobs are filed: each _finish then
-- finds no 'cancel' dependents left, so it calls back here for nothing, and
-- a chain of thousands of jobs is one loop, not a thousand nested calls.
CREATE OR REPLACE FUNCTION pgsched._fail_dependents(
    p_id    bigint,
    p_state pgsched.job_state,
    p_now   timestamptz
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_jobs bigint[];
    v_shards smallint[];
    v_deps bigint[];
    v_job pgsched.jobs;
    v_count integer := 0;
BEGIN
    WITH RECURSIVE doomed (job, shard, dep) AS (
        SELECT d.job, d.job_shard, d.depends_on
        FROM pgsched.job_dependencies d
        WHERE d.depends_on = p_id AND d.on_failure = 'cancel'
        UNION
        SELECT d.job, d.job_shard, d.depends_on
        FROM doomed x
        JOIN pgsched.job_dependencies d ON d.depends_on = x.job AND d.on_failure = 'cancel'
    ), reasons AS (
        -- one reason per job: its lowest dependency among those that fail
        SELECT DISTINCT ON (x.job) x.job, x.shard, x.dep FROM doomed x ORDER BY x.job, x.dep
    )
    SELECT pg_catalog.array_agg(f.job ORDER BY f.job), pg_catalog.array_agg(f.shard ORDER BY f.job),
           pg_catalog.array_agg(f.dep ORDER BY f.job)
    INTO v_jobs, v_shards, v_deps
    FROM reasons f;
    IF v_jobs IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM pgsched.job_dependencies d
    WHERE d.on_failure = 'cancel' AND (d.depends_on = p_id OR d.depends_on = ANY (v_jobs));
    -- In id order, like every path that takes several job rows.
    FOR i IN 1 .. pg_catalog.cardinality(v_jobs) LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = v_jobs[i] AND j.shard = v_shards[i] AND j.state = 'waiting'
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._finish(v_job, 'cancelled', p_now, pg_catalog.format(
                'dependency %s %s', v_deps[i], CASE WHEN v_deps[i] = p_id THEN p_state::text ELSE 'cancelled' END));
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END
$$;


-- functions/_finish.sql
-- _finish
-- contract: records a job that was just deleted from pgsched.jobs (by the
-- caller's own fenced DELETE, in the same transaction) as finished: a
-- history row in p_state, one audit event, the idempotency key's
-- retention clock started (a service's key is freed at once), and the status event on pgsched_events (when
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
         service)
    VALUES (p_job.id, p_job.shard, p_state, p_job.queue, p_job.task, p_job.args, p_job.priority,
            p_job.run_at, p_job.attempt, p_job.max_attempts, p_job.lease_token, p_job.leased_by,
            p_job.idempotency_key, p_job.labels, p_job.tenant, p_job.created_at,
            -- a worker that never called start() (SQL only): the claim is the start;
            -- a job cancelled before its handler started has none
            coalesce(p_job.started_at,
                     CASE WHEN p_job.state = 'running' AND p_state <> 'cancelled' THEN p_job.claimed_at END),
            p_now, p_result, p_error, p_job.schedule, p_job.service);
    IF v_config.events THEN
        PERFORM pg_catalog.pg_notify('pgsched_events', pg_catalog.json_build_object(
            'id', p_job.id, 'queue', p_job.queue, 'task', p_job.task, 'state', p_state,
            'attempt', p_job.attempt)::text);
    END IF;
    IF v_config.audit THEN
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


-- functions/_put_back.sql
-- _put_back
-- contract: returns a running job to the queue under its fencing token
-- without spending its failure budget: max_attempts grows by one, so the
-- attempt counter keeps growing (every run has a new attempt and token) while
-- the job keeps as many failures as it had. A job whose cancellation was
-- requested is cancelled instead. Returns the new state, or 'lease_lost'.
--
-- Hand-backs are bounded: a started run handed back by a worker shutting
-- down (p_kind 'released') counts in `handbacks`; the one past
-- pgsched.config.max_handbacks (default 3) makes the job 'dead' with that
-- reason, so a job that hangs every worker cannot hold a slot across deploys
-- forever. A job released before its handler started counts nothing, and
-- neither does a service job (jobs.service): it runs until cancelled, so
-- every deploy hands it back.
CREATE OR REPLACE FUNCTION pgsched._put_back(
    p_job_id bigint,
    p_token  bigint,
    p_run_at timestamptz,
    p_kind   text,
    p_now    timestamptz
)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_job pgsched.jobs;
    v_run_at timestamptz := coalesce(p_run_at, p_now);
    v_scope text := pgsched._tenant_scope();
    v_max_handbacks integer;
    v_error text;
BEGIN
    SELECT c.max_handbacks INTO v_max_handbacks FROM pgsched.config c;
    DELETE FROM pgsched.jobs j
    WHERE p_kind = 'released'
      AND j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NULL AND j.started_at IS NOT NULL
      AND j.handbacks >= v_max_handbacks AND NOT j.service
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        v_error := pg_catalog.format('handed back unfinished at shutdown %s times (max_handbacks %s)',
                                     v_job.handbacks + 1, v_max_handbacks);
        PERFORM pgsched._finish(v_job, 'dead', p_now, v_error, NULL,
            pg_catalog.jsonb_build_object('error', v_error, 'reason', 'handbacks', 'handbacks', v_job.handbacks + 1));
        RETURN 'dead';
    END IF;

    UPDATE pgsched.jobs j
    SET run_at = v_run_at,
        state = CASE WHEN v_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        -- saturates at the enqueue bound (jobs_max_attempts_range): never overflows
        max_attempts = j.max_attempts + (j.max_attempts < 1000000)::integer,
        handbacks = j.handbacks + (p_kind = 'released' AND j.started_at IS NOT NULL AND NOT j.service)::integer,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        PERFORM pgsched._event(p_job_id, p_now, p_kind, v_job.attempt, NULL, p_token,
            pg_catalog.jsonb_build_object('run_at', v_run_at));
        IF v_job.state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_job.state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NOT NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        PERFORM pgsched._finish(v_job, 'cancelled', p_now, 'cancelled while running');
        RETURN 'cancelled';
    END IF;
    RETURN 'lease_lost';
END
$$;


-- functions/_release.sql
-- _release
-- contract: makes due those of the waiting jobs (p_jobs on p_shards) that
-- have no dependency left in pgsched.job_dependencies: 'available' (run_at
-- moved up to p_now, so start lag counts from the release), or 'scheduled'
-- when run_at is still ahead; wakes their queues. Returns how many it made due.
--
-- Two statements on purpose. The first locks the jobs in id order; the
-- second, with a snapshot taken after those locks, looks at what is left.
-- Two dependencies completing at once in two transactions each delete their
-- own row and then queue here: the second one sees the first one's delete
-- committed, so the last completion always releases the job.
CREATE OR REPLACE FUNCTION pgsched._release(
    p_jobs   bigint[],
    p_shards smallint[],
    p_now    timestamptz
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_queues text[];
    v_scheduled boolean;
    v_count integer;
BEGIN
    PERFORM 1
    FROM pgsched.jobs j
    JOIN unnest(p_jobs, p_shards) AS u(id, shard) ON j.id = u.id AND j.shard = u.shard
    WHERE j.state = 'waiting'
    ORDER BY j.id
    FOR UPDATE OF j;

    WITH released AS (
        UPDATE pgsched.jobs j
        SET state = CASE WHEN j.run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            run_at = greatest(j.run_at, p_now)
        FROM unnest(p_jobs, p_shards) AS u(id, shard)
        WHERE j.id = u.id AND j.shard = u.shard AND j.state = 'waiting'
          AND NOT EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.job = j.id)
        RETURNING j.queue, j.state
    )
    SELECT pg_catalog.array_agg(DISTINCT r.queue) FILTER (WHERE r.state = 'available'),
           pg_catalog.bool_or(r.state = 'scheduled'), pg_catalog.count(*)
    INTO v_queues, v_scheduled, v_count
    FROM released r;
    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    IF v_scheduled THEN
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN v_count;
END
$$;


-- functions/_release_dependents.sql
-- _release_dependents
-- contract: for those of p_ids that completed in this transaction (at
-- p_now), drops the dependency rows that waited for them and makes due every
-- dependent left with none (_release). complete() calls it, in a statement of
-- its own after the one that finished the jobs: an enqueue that added a
-- dependency on one of them held that job's row (FOR KEY SHARE) until it
-- committed, so this statement's snapshot sees the row it added.
CREATE OR REPLACE FUNCTION pgsched._release_dependents(
    p_ids bigint[],
    p_now timestamptz
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_jobs bigint[];
    v_shards smallint[];
BEGIN
    -- Only what this transaction completed: a stale completion of a job that
    -- since died must not release dependents that wait for its redrive.
    WITH done AS (
        SELECT h.id
        FROM pgsched.job_history h
        WHERE h.id = ANY (p_ids) AND h.finished_at = p_now AND h.state = 'completed'
          AND h.finished_xid = pg_catalog.pg_current_xact_id()
    ), freed AS (
        DELETE FROM pgsched.job_dependencies d
        USING done
        WHERE d.depends_on = done.id
        RETURNING d.job, d.job_shard
    )
    SELECT pg_catalog.array_agg(f.job ORDER BY f.job), pg_catalog.array_agg(f.job_shard ORDER BY f.job)
    INTO v_jobs, v_shards
    FROM (SELECT DISTINCT fr.job, fr.job_shard FROM freed fr) f;
    IF v_jobs IS NULL THEN
        RETURN 0;
    END IF;
    RETURN pgsched._release(v_jobs, v_shards, p_now);
END
$$;


-- functions/cancel.sql
-- cancel
-- contract: a waiting job (scheduled, waiting or available) is cancelled at once and
-- returns 'cancelled'; once that is returned the job can never start. A
-- running job gets a cancel request ('cancel_requested'), and its worker is
-- told at once: a NOTIFY on pgsched_cancel whose payload is the job id only
-- (the heartbeat, or a short poll without LISTEN, is the fallback). A claimed
-- job whose handler has not started yet never starts (start() refuses it);
-- a started one ends as 'cancelled' unless it had already succeeded. A
-- finished job is left as it is ('already_completed', 'already_dead',
-- 'already_cancelled'); an unknown id
-- returns 'not_found', as does a job of another tenant for a session
-- confined to one (see _check_tenant).
CREATE OR REPLACE FUNCTION pgsched.cancel(
    job_id bigint,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_job pgsched.jobs;
    v_state pgsched.job_state;
    v_tenant text;
BEGIN
    -- This function bypasses row-level security, so it confines tenants itself.
    SELECT t.tenant INTO v_tenant
    FROM (SELECT j.tenant FROM pgsched.jobs j WHERE j.id = cancel.job_id
          UNION ALL
          SELECT h.tenant FROM pgsched.job_history h WHERE h.id = cancel.job_id) t
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            PERFORM pgsched._check_tenant(v_tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN 'not_found';
        END;
    END IF;

    -- A job can move between waiting and running while we look (a claim, a
    -- retry); each statement is fenced on state, so try the pair again.
    FOR i IN 1 .. 3 LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = cancel.job_id AND j.state IN ('scheduled', 'waiting', 'available')
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._finish(v_job, 'cancelled', v_now, 'cancelled before it ran');
            RETURN 'cancelled';
        END IF;

        UPDATE pgsched.jobs j
        SET cancel_requested_at = coalesce(j.cancel_requested_at, v_now)
        WHERE j.id = cancel.job_id AND j.state = 'running'
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._event(v_job.id, v_now, 'cancel_requested', v_job.attempt, v_job.leased_by,
                                   v_job.lease_token);
            PERFORM pg_catalog.pg_notify('pgsched_cancel', v_job.id::text);
            RETURN 'cancel_requested';
        END IF;

        SELECT h.state INTO v_state
        FROM pgsched.job_history h
        WHERE h.id = cancel.job_id
        ORDER BY h.finished_at DESC
        LIMIT 1;
        IF FOUND AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = cancel.job_id) THEN
            RETURN 'already_' || v_state::text;
        END IF;
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = cancel.job_id) THEN
            RETURN 'not_found';
        END IF;
    END LOOP;
    RETURN 'busy';
END
$$;


-- functions/claim.sql
-- claim
-- contract: leases up to n due jobs of `queues` (skipping paused queues, and
-- jobs whose labels the worker does not all offer) to `worker` for `lease`.
-- Each claimed job gets a new fencing token, larger than any before, and its
-- attempt incremented. A job is never leased twice at once: rows are locked
-- with SKIP LOCKED and re-checked as 'available' by the same UPDATE.
--
-- Shards are visited one statement each, starting at start_shard (workers
-- rotate it), so concurrent claimers spread over partitions instead of
-- fighting for the same rows; within a shard, each queue is one index scan
-- in (priority DESC, run_at, id) order that stops after n rows, whatever the
-- backlog. Queues take turns by the same rotation. Priority orders jobs
-- within a shard and queue; across shards it holds within one rotation.
--
-- With start_shard NULL, each queue is instead one statement over all shards
-- at once (a merge of every shard's index, strict priority across shards):
-- the cheaper pass when little is queued, which workers use when idle.
CREATE OR REPLACE FUNCTION pgsched.claim(
    worker      text,
    queues      text[],
    n           integer,
    lease       interval,
    labels      text[]      DEFAULT '{}',
    start_shard integer     DEFAULT NULL,
    p_now       timestamptz DEFAULT NULL
)
RETURNS TABLE (
    id bigint, shard smallint, queue text, task text, args jsonb, attempt integer,
    max_attempts integer, lease_token bigint, idempotency_key text, run_at timestamptz,
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz, trace_context jsonb
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan for every shard (pruned to the shard when it runs) instead of
-- planning the partitioned statement again at each call.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    -- The clock now, not at transaction start: the lease runs from the claim.
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_shards integer;
    v_audit boolean;
    v_queues text[];
    v_left integer := claim.n;
    v_got integer;
    v_shard smallint;
    v_queue text;
    v_nq integer;
    -- A session confined to a tenant claims only that tenant's jobs.
    v_scope text := pgsched._tenant_scope();
BEGIN
    IF claim.n IS NULL OR claim.n < 1 OR claim.lease IS NULL OR claim.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: claim needs n >= 1 and a positive lease' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.shards, c.audit INTO v_shards, v_audit FROM pgsched.config c;
    SELECT pg_catalog.array_agg(q) INTO v_queues
    FROM unnest(claim.queues) q
    WHERE NOT EXISTS (SELECT 1 FROM pgsched.queues pq WHERE pq.name = q AND pq.paused);
    IF v_queues IS NULL THEN
        RETURN;
    END IF;

    v_nq := pg_catalog.cardinality(v_queues);

    IF claim.start_shard IS NULL THEN
        FOR i IN 1 .. v_nq LOOP
            v_queue := v_queues[i];
            RETURN QUERY
            WITH due AS MATERIALIZED (
                SELECT j.id, j.shard
                FROM pgsched.jobs j
                WHERE j.state = 'available'
                  AND j.queue = v_queue
                  AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
                  AND (v_scope IS NULL OR j.tenant = v_scope)
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT v_left
                FOR UPDATE SKIP LOCKED
            ), leased AS (
                UPDATE pgsched.jobs j
                SET state = 'running',
                    attempt = j.attempt + 1,
                    lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                    leased_by = claim.worker,
                    lease_expires_at = v_now + claim.lease,
                    claimed_at = v_now,
                    started_at = NULL  -- set by start(), when a handler slot takes it
                WHERE j.id = ANY (ARRAY(SELECT due.id FROM due))
                  AND j.shard = ANY (ARRAY(SELECT due.shard FROM due))
                  AND j.state = 'available'
                RETURNING j.*
            ), audit AS (
                INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
                SELECT l.id, v_now, 'claimed', l.attempt, claim.worker, l.lease_token
                FROM leased l
                WHERE v_audit
            )
            SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
                   l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at, l.trace_context
            FROM leased l;
            GET DIAGNOSTICS v_got = ROW_COUNT;
            v_left := v_left - v_got;
            EXIT WHEN v_left <= 0;
        END LOOP;
        RETURN;
    END IF;

    FOR i IN 0 .. v_shards * v_nq - 1 LOOP
        v_shard := ((coalesce(claim.start_shard, 0) + i / v_nq) % v_shards + v_shards) % v_shards;
        v_queue := v_queues[((coalesce(claim.start_shard, 0) + i) % v_nq + v_nq) % v_nq + 1];
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT j.id
            FROM pgsched.jobs j
            WHERE j.shard = v_shard
              AND j.state = 'available'
              AND j.queue = v_queue
              -- the first arm keeps the row estimate right (most jobs need no labels)
              AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
              AND (v_scope IS NULL OR j.tenant = v_scope)
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT v_left
            FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE pgsched.jobs j
            SET state = 'running',
                attempt = j.attempt + 1,
                lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                leased_by = claim.worker,
                lease_expires_at = v_now + claim.lease,
                claimed_at = v_now,
                started_at = NULL  -- set by start(), when a handler slot takes it
            -- ids as an array: one index probe each, never a scan of the partition
            WHERE j.shard = v_shard AND j.id = ANY (ARRAY(SELECT due.id FROM due)) AND j.state = 'available'
            RETURNING j.*
        ), audit AS (
            INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
            SELECT l.id, v_now, 'claimed', l.attempt, claim.worker, l.lease_token
            FROM leased l
            WHERE v_audit
        )
        SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at, l.trace_context
        FROM leased l;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        EXIT WHEN v_left <= 0;
    END LOOP;
END
$$;


-- functions/complete.sql
-- complete
-- contract: finishes the jobs whose fencing token is still current, in one
-- statement: each accepted job leaves pgsched.jobs and enters
-- pgsched.job_history as 'completed' with its result, with one audit event.
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
             service)
        SELECT d.id, d.shard, 'completed', d.queue, d.task, d.args, d.priority, d.run_at, d.attempt,
               d.max_attempts, d.lease_token, d.leased_by, d.idempotency_key, d.labels, d.tenant,
               -- a worker that never called start() ran it from its claim on
               d.created_at, coalesce(d.started_at, d.claimed_at), v_now, d.result, NULL, d.schedule, d.service
        FROM done d
    ), audit AS (
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
        SELECT d.id, v_now, 'completed', d.attempt, d.leased_by, d.lease_token
        FROM done d
        WHERE v_config.audit
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


-- functions/enqueue.sql
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
    trace_context   jsonb       DEFAULT NULL
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
    IF enqueue.timeout <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: timeout % is not allowed: it must be positive (NULL means none)', enqueue.timeout
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_timeout_positive', COLUMN = 'timeout',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
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
         timeout, trace_context)
    VALUES (v_id, v_shard,
            CASE WHEN v_waits THEN 'waiting' WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, enqueue.task, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0), v_run_at, 0, v_max,
            enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant, enqueue.timeout,
            enqueue.trace_context);
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


-- functions/enqueue_command.sql
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
-- offer, so no other worker ever claims it.
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
    SELECT c.max_payload_bytes, coalesce(v_max, t.max_attempts, c.default_max_attempts)
    INTO v_limit, v_max
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
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant)
    VALUES (v_id, v_shard, CASE WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, 'pgsched.command', v_args, coalesce(enqueue_command.priority, 0), v_run_at, 0, v_max,
            enqueue_command.idempotency_key, v_labels, enqueue_command.tenant);
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);
    PERFORM pg_catalog.pg_notify(CASE WHEN v_run_at <= v_now THEN 'pgsched_jobs' ELSE 'pgsched_scheduled' END,
                                 CASE WHEN v_run_at <= v_now THEN v_queue ELSE '' END);
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
-- depends_on are JSON arrays, one per job, of job ids and of references to
-- earlier rows of this batch as negative 1-based positions (-1 is the first
-- row), so a whole graph is one call; on_dependency_failure ('cancel' or
-- 'wait') is each job's policy for a dependency ending dead or cancelled
-- (see _depend).
-- A refused row raises naming its position (1-based, the ord returned), its
-- column and its value; nothing of the batch is written. trace_context (the
-- caller's trace propagation headers) is stored with every job of the batch.
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
    trace_context    jsonb         DEFAULT NULL
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
                  pg_catalog.array_ndims(on_dependency_failure))) AS a(name, len, dims)
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
                 trace_context)
            SELECT pg_catalog.nextval('pgsched.jobs_id_seq'),
                   pg_catalog.floor(pg_catalog.random() * v_shards)::smallint,
                   CASE WHEN pg_catalog.jsonb_typeof(u.deps) <> 'array' OR pg_catalog.jsonb_array_length(u.deps) > 0
                        THEN 'waiting'
                        WHEN coalesce(u.run_at, v_now) <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
                   coalesce(u.queue, 'default'), u.task, coalesce(u.args, '{}'), coalesce(u.priority, 0),
                   coalesce(u.run_at, v_now), 0, coalesce(u.max_attempts, t.max_attempts, v_default_attempts), u.tenant,
                   CASE WHEN u.labels IS NULL THEN '{}'::text[]
                        ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(u.labels)) END,
                   enqueue_many.trace_context
            FROM unnest(tasks, args, queues, run_ats, priorities, max_attempts, tenants, labels, depends_on)
                 WITH ORDINALITY AS u(task, args, queue, run_at, priority, max_attempts, tenant, labels, deps, ord)
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
               u.priority, u.key, u.max_attempts, u.tenant, u.labels, u.deps,
               pg_catalog.nextval('pgsched.jobs_id_seq') AS id
        FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels, depends_on)
             WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, deps, ord)
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
             labels, trace_context)
        SELECT i.id, i.shard,
               CASE WHEN pg_catalog.jsonb_typeof(i.deps) <> 'array' OR pg_catalog.jsonb_array_length(i.deps) > 0
                    THEN 'waiting'
                    WHEN i.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
               i.queue, i.task, coalesce(i.args, '{}'), coalesce(i.priority, 0), i.run_at, 0,
               coalesce(i.max_attempts, t.max_attempts, v_default_attempts), i.key, i.tenant,
               CASE WHEN i.labels IS NULL THEN '{}'::text[]
                    ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(i.labels)) END,
               enqueue_many.trace_context
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


-- functions/enqueue_service.sql
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


-- functions/expire_leases.sql
-- expire_leases
-- contract: jobs whose lease ran out (their worker died, hung or lost its
-- connection) go back to 'available' at once, keeping their run_at (so they
-- come before newer work, and their start lag shows the time lost), or to 'dead' when their
-- attempts are used up, or to 'cancelled' when cancellation was requested,
-- each with a 'lease_expired' event naming the worker and token that lost
-- the lease. A service job (jobs.service) always goes back to 'available',
-- its attempt given back, so expiries never send it dead. Candidates are locked with SKIP LOCKED and every write re-checks
-- the token, the state and the expiry, so a completion racing the expiry
-- wins cleanly and a stale read never overwrites a newer claim. Returns the
-- number of jobs handled (at most p_limit; call again while it is p_limit).
-- Runs past their deadline (deadline_at + config.timeout_grace) are failed
-- too, even while their heartbeats continue (see _fail_overdue).
CREATE OR REPLACE FUNCTION pgsched.expire_leases(
    p_now   timestamptz DEFAULT NULL,
    p_limit integer     DEFAULT 1000,
    p_shard integer     DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_requeued text[];
    v_finished integer;
    v_count integer;
    v_job pgsched.jobs;
    v_expired record;
    v_outcome pgsched.job_state;
BEGIN
    WITH expired AS MATERIALIZED (
        SELECT j.id, j.shard, j.lease_token, j.leased_by, j.lease_expires_at
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.lease_expires_at < v_now
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), requeued AS (
        UPDATE pgsched.jobs j
        SET state = 'available',
            lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
            -- A service's lost lease does not use up an attempt: it is restarted, never sent dead.
            max_attempts = CASE WHEN j.service THEN least(j.max_attempts::bigint + 1, 1000000)::integer
                                ELSE j.max_attempts END,
            last_error = pg_catalog.format('lease expired at %s (worker %s)', e.lease_expires_at, e.leased_by)
        FROM expired e
        WHERE j.id = e.id AND j.shard = e.shard AND j.lease_token = e.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
          AND (j.attempt < j.max_attempts OR j.service) AND j.cancel_requested_at IS NULL
        RETURNING j.id, j.queue, j.attempt, e.leased_by, e.lease_token, e.lease_expires_at
    ), audit AS (
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        SELECT r.id, v_now, 'lease_expired', r.attempt, r.leased_by, r.lease_token,
               pg_catalog.jsonb_build_object('lease_expires_at', r.lease_expires_at, 'outcome', 'available')
        FROM requeued r, pgsched.config c
        WHERE c.audit
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT r.queue)
    INTO v_count, v_requeued
    FROM requeued r;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_requeued) q;

    -- Out of attempts (or cancel requested): these leave the active table.
    -- Rare, so one fenced DELETE per job keeps the filing simple.
    v_finished := 0;
    FOR v_expired IN
        SELECT j.id, j.shard, j.lease_token
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.lease_expires_at < v_now
          AND ((j.attempt >= j.max_attempts AND NOT j.service) OR j.cancel_requested_at IS NOT NULL)
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = v_expired.id AND j.shard = v_expired.shard AND j.lease_token = v_expired.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            v_outcome := CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END;
            PERFORM pgsched._event(v_job.id, v_now, 'lease_expired', v_job.attempt, v_job.leased_by,
                v_job.lease_token,
                pg_catalog.jsonb_build_object('lease_expires_at', v_job.lease_expires_at, 'outcome', v_outcome));
            PERFORM pgsched._finish(
                v_job,
                v_outcome,
                v_now,
                pg_catalog.format('lease expired at %s (worker %s) after attempt %s of %s',
                                  v_job.lease_expires_at, v_job.leased_by, v_job.attempt, v_job.max_attempts),
                NULL,
                pg_catalog.jsonb_build_object('lease_expires_at', v_job.lease_expires_at, 'reason', 'lease_expired'));
            v_finished := v_finished + 1;
        END IF;
    END LOOP;

    RETURN v_count + v_finished + pgsched._fail_overdue(p_now, p_limit, p_shard);
END
$$;


-- functions/fail.sql
-- fail
-- contract: reports a failed run under its fencing token and returns the
-- job's resulting state: 'scheduled' or 'available' (a retry, at retry_at or
-- after the task/queue backoff), 'dead' (attempts exhausted, or final), or
-- 'cancelled' (cancellation had been requested). A stale token changes
-- nothing and returns 'lease_lost'. A result (a command's exit code and
-- output) is kept with the failed attempt's event, and in the history row
-- when the job ends here.
--
-- Each branch is one fenced statement (token and state in its WHERE). The
-- retry branch runs first and excludes cancel-requested jobs; if a cancel
-- lands between the two, the terminal branch catches it.
CREATE OR REPLACE FUNCTION pgsched.fail(
    job_id   bigint,
    token    bigint,
    error    text,
    retry_at timestamptz DEFAULT NULL,
    final    boolean     DEFAULT false,
    p_now    timestamptz DEFAULT NULL,
    result   jsonb       DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_job pgsched.jobs;
    v_state pgsched.job_state;
    v_scope text := pgsched._tenant_scope();
BEGIN
    UPDATE pgsched.jobs j
    SET run_at = v.run_at,
        state = CASE WHEN v.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
        last_error = fail.error
    FROM (
        SELECT j2.id, j2.shard, j2.leased_by,
               coalesce(fail.retry_at, v_now + pgsched._backoff(j2.task, j2.queue, j2.attempt)) AS run_at
        FROM pgsched.jobs j2
        WHERE j2.id = fail.job_id AND j2.lease_token = fail.token
          AND (v_scope IS NULL OR j2.tenant = v_scope)
    ) v
    WHERE j.id = v.id AND j.shard = v.shard
      AND j.lease_token = fail.token AND j.state = 'running'
      AND NOT coalesce(fail.final, false)
      AND j.attempt < j.max_attempts
      AND j.cancel_requested_at IS NULL
    RETURNING j.state, j.attempt, j.queue, j.run_at, v.leased_by
    INTO v_state, v_job.attempt, v_job.queue, v_job.run_at, v_job.leased_by;
    IF FOUND THEN
        PERFORM pgsched._event(fail.job_id, v_now, 'failed', v_job.attempt, v_job.leased_by, fail.token,
            pg_catalog.jsonb_build_object('error', fail.error, 'retry_at', v_job.run_at)
            || CASE WHEN fail.result IS NULL THEN '{}' ELSE pg_catalog.jsonb_build_object('result', fail.result) END);
        IF v_state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = fail.job_id AND j.lease_token = fail.token AND j.state = 'running'
      AND (v_scope IS NULL OR j.tenant = v_scope)
      AND (coalesce(fail.final, false) OR j.attempt >= j.max_attempts OR j.cancel_requested_at IS NOT NULL)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        v_state := CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END;
        PERFORM pgsched._finish(v_job, v_state, v_now, fail.error, fail.result);
        RETURN v_state::text;
    END IF;
    RETURN 'lease_lost';
END
$$;


-- functions/register_tasks.sql
-- register_tasks
-- contract: upserts task policies from a JSON array of objects with keys
-- name (required), queue, max_attempts, backoff_base, backoff_max,
-- backoff_jitter, timeout (seconds). Workers call it at start with the tasks they
-- serve. Returns the number of tasks registered. A session confined to a
-- tenant adds new tasks only: it never changes a policy every tenant shares.
CREATE OR REPLACE FUNCTION pgsched.register_tasks(tasks jsonb)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    IF pg_catalog.jsonb_typeof(register_tasks.tasks) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'pgsched: register_tasks expects a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.tasks AS t
        (name, queue, max_attempts, backoff_base, backoff_max, backoff_jitter, updated_at, timeout)
    SELECT e->>'name', coalesce(e->>'queue', 'default'), (e->>'max_attempts')::integer,
           pg_catalog.make_interval(secs => (e->>'backoff_base')::double precision),
           pg_catalog.make_interval(secs => (e->>'backoff_max')::double precision),
           (e->>'backoff_jitter')::real, pg_catalog.now(),
           pg_catalog.make_interval(secs => (e->>'timeout')::double precision)
    FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
    ON CONFLICT (name) DO UPDATE
    SET queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts, backoff_base = EXCLUDED.backoff_base,
        backoff_max = EXCLUDED.backoff_max, backoff_jitter = EXCLUDED.backoff_jitter, updated_at = EXCLUDED.updated_at,
        timeout = EXCLUDED.timeout
    -- A session confined to a tenant adds tasks but never changes the policy
    -- of a task every tenant shares.
    WHERE pgsched._tenant_scope() IS NULL
      AND (t.queue, t.max_attempts, t.backoff_base, t.backoff_max, t.backoff_jitter, t.timeout)
          IS DISTINCT FROM (EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.backoff_base,
                            EXCLUDED.backoff_max, EXCLUDED.backoff_jitter, EXCLUDED.timeout);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;


-- functions/retry.sql
-- retry
-- contract: re-enqueues (redrives) a dead or cancelled job under its own id,
-- due now, with a fresh attempt budget (the task's max_attempts, else the
-- install default) on top of the attempts it used: the attempt counter keeps
-- growing across redrives. Its history rows stay. Returns
-- 'retried', 'active' (the job is queued or running already),
-- 'not_retryable' (it completed) or 'not_found' (also for a job of another
-- tenant when the session is confined to one, see _check_tenant).
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
        (id, shard, queue, task, args, priority, run_at, idempotency_key, labels, tenant, created_at, service)
    VALUES (v_last.id, v_last.shard, v_last.queue, v_last.task, v_last.args, v_last.priority, v_now,
            v_last.idempotency_key, v_last.labels, v_last.tenant, v_last.created_at, v_last.service)
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


-- functions/start.sql
-- start
-- contract: records that the handlers of these claimed jobs start now, in
-- one statement for a batch of starts, fenced by each job's token: only a
-- job whose lease is current and whose cancellation was not requested gets
-- its started_at (the database's clock, read when the statement runs). Returns
-- one row per input job: 'started' (run the handler), 'cancel_requested'
-- (do not start it: cancel it, e.g. fail() records it 'cancelled') or
-- 'lease_lost' (another run may own it: do not start it). A job claimed but
-- not started has started_at NULL, so views tell "waiting for a slot" from
-- "running", and start lag (started_at - run_at) counts the wait for a slot.
-- A started job carries its deadline: deadline_at = started_at + its timeout
-- (the job's, else its task's in pgsched.tasks), returned as `timeout` so the
-- worker enforces it too; expire_leases fails a run past it (_fail_overdue).
--
-- Cancel-requested rows are rewritten unchanged rather than filtered out:
-- when a cancel() commits while this statement waits for the row, the
-- re-checked row version decides, so a cancel never loses to a start that
-- began a moment before it.
CREATE OR REPLACE FUNCTION pgsched.start(
    job_ids bigint[],
    tokens  bigint[],
    shards  smallint[]  DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text, timeout interval)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token, u.shard
        FROM unnest(start.job_ids, start.tokens, start.shards) AS u(id, token, shard)
        WHERE u.id IS NOT NULL
    ), stamped AS (
        UPDATE pgsched.jobs j
        SET started_at = CASE WHEN j.cancel_requested_at IS NULL THEN v_now ELSE j.started_at END,
            deadline_at = CASE WHEN j.cancel_requested_at IS NULL
                THEN v_now + coalesce(j.timeout, (SELECT t.timeout FROM pgsched.tasks t WHERE t.name = j.task))
                ELSE j.deadline_at END
        FROM input u
        WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
          AND (u.shard IS NULL OR j.shard = u.shard)
        RETURNING j.id, j.cancel_requested_at IS NULL AS go, j.deadline_at - j.started_at AS timeout
    )
    SELECT u.id, CASE WHEN s.go THEN 'started' WHEN NOT s.go THEN 'cancel_requested' ELSE 'lease_lost' END,
           CASE WHEN s.go THEN s.timeout END
    FROM input u
    LEFT JOIN stamped s ON s.id = u.id;
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
--
-- Two triggers call it (30_triggers.sql). For a writer other than the
-- schema's owner (TG_ARGV[0] = 'untrusted': a plain INSERT by an
-- application) the database also assigns the id and stamps created_at,
-- whatever the INSERT said, and a schedule link and the command task are
-- refused (_check_command_task): only the owner's
-- functions (retry, the scanners' add_occurrences) set those. The shard, the
-- partition key, cannot change in a row trigger; pgsched_enqueue may name
-- only the columns a user chooses (90_grants.sql), so it comes from the
-- column default.
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

    IF TG_ARGV[0] = 'untrusted' THEN
        PERFORM pgsched._check_command_task(NEW.task, 'INSERT INTO pgsched.jobs');
        IF NEW.schedule IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: schedule is set by the scanners, not by an INSERT'
                USING ERRCODE = 'insufficient_privilege', SCHEMA = 'pgsched', TABLE = 'jobs', COLUMN = 'schedule';
        END IF;
        -- A copied id would give two active rows one identity (on two shards).
        NEW.id := pg_catalog.nextval('pgsched.jobs_id_seq');
        NEW.created_at := v_now;
        -- Before the key is looked at, so another tenant's keys reveal nothing
        -- (row-level security checks the row itself after this trigger).
        IF NEW.idempotency_key IS NOT NULL THEN
            PERFORM pgsched._check_tenant(NEW.tenant);
        END IF;
    END IF;

    -- A new job starts from nothing, whatever the INSERT said.
    NEW.attempt := 0;
    NEW.lease_token := NULL;
    NEW.leased_by := NULL;
    NEW.lease_expires_at := NULL;
    NEW.started_at := NULL;
    NEW.claimed_at := NULL;
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
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        VALUES (NEW.idempotency_key, NEW.tenant, NEW.id, NEW.shard, v_now)
        ON CONFLICT (key, tenant) DO UPDATE
            SET job_id = NEW.id, shard = NEW.shard, created_at = v_now, expires_at = NULL
            WHERE k.job_id = NEW.id OR k.expires_at < v_now;
        IF NOT FOUND THEN
            IF NEW.schedule IS NULL THEN
                PERFORM pgsched._key_holder(NEW.idempotency_key, NEW.task, NEW.args, NULL, NEW.tenant);
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


-- functions/tg_schedules__before_write.sql
-- tg_schedules__before_write
-- contract: a schedule lives on the shard of its name; any change to what a
-- schedule fires (cron, zone, task, args, queue, policies, enabled...) bumps
-- its version, so the next scan withdraws the occurrences expanded under the
-- old version and expands the new one. Works for plain INSERT/UPDATE too,
-- which are refused what upsert_schedule refuses (_check_schedule; and the
-- command task, _check_command_task)
-- (SECURITY DEFINER: pgsched_admin writes the table but not the helpers).
CREATE OR REPLACE FUNCTION pgsched.tg_schedules__before_write()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_command_task(NEW.task, 'a schedule');
    IF TG_OP = 'INSERT' OR (NEW.cron, NEW.priority, NEW.max_attempts, NEW.labels, NEW.tenant, NEW.args)
                           IS DISTINCT FROM (OLD.cron, OLD.priority, OLD.max_attempts, OLD.labels, OLD.tenant, OLD.args) THEN
        PERFORM pgsched._check_schedule(NEW.cron, NEW.priority, NEW.max_attempts, NEW.labels, NEW.tenant, NEW.args);
    END IF;
    NEW.shard := pgsched._shard_for_key(NEW.name);
    IF TG_OP = 'INSERT' THEN
        NEW.version := 1;
        NEW.expanded_version := 0;
        NEW.expanded_until := NULL;
        RETURN NEW;
    END IF;
    IF NEW.name <> OLD.name THEN
        RAISE EXCEPTION 'pgsched: a schedule cannot be renamed; remove it and add it again'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF (NEW.cron, NEW.timezone, NEW.task, NEW.args, NEW.queue, NEW.priority, NEW.max_attempts, NEW.labels,
        NEW.tenant, NEW.gap_policy, NEW.overlap_policy, NEW.misfire_policy, NEW.misfire_cap, NEW.misfire_grace, NEW.concurrency,
        NEW.enabled, NEW.horizon)
       IS DISTINCT FROM
       (OLD.cron, OLD.timezone, OLD.task, OLD.args, OLD.queue, OLD.priority, OLD.max_attempts, OLD.labels,
        OLD.tenant, OLD.gap_policy, OLD.overlap_policy, OLD.misfire_policy, OLD.misfire_cap, OLD.misfire_grace, OLD.concurrency,
        OLD.enabled, OLD.horizon) THEN
        NEW.version := OLD.version + 1;
        NEW.updated_at := pg_catalog.now();
        NEW.last_error := NULL;
    END IF;
    RETURN NEW;
END
$$;


-- 40_views.sql
-- pgsched: views, the operator's surface. Per queue, never only averages.

-- queue_stats: depth by state, the age of the oldest due job, retries, and
-- over the last five minutes the finished counts, throughput and start lag
-- (handler start - due) percentiles. running counts jobs whose handler has
-- started; claimed, those leased to a worker and waiting for a free slot.
CREATE OR REPLACE VIEW pgsched.queue_stats AS
WITH active AS (
    SELECT j.queue,
           pg_catalog.count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
           pg_catalog.count(*) FILTER (WHERE j.state = 'available') AS available,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.started_at IS NOT NULL) AS running,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.started_at IS NULL) AS claimed,
           pg_catalog.count(*) FILTER (WHERE j.state IN ('scheduled', 'available') AND j.attempt > 0) AS retrying,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.lease_expires_at < pg_catalog.now())
               AS lease_expired,
           -- compared as text: an enum value cannot be used in the transaction that adds it (a migration)
           pg_catalog.count(*) FILTER (WHERE j.state::text = 'waiting') AS waiting,
           pg_catalog.min(j.run_at) FILTER (
               WHERE j.state = 'available' OR (j.state = 'scheduled' AND j.run_at <= pg_catalog.now()))
               AS oldest_due_at
    FROM pgsched.jobs j
    GROUP BY j.queue
), recent AS (
    SELECT h.queue,
           pg_catalog.count(*) FILTER (WHERE h.state = 'completed') AS completed_5m,
           pg_catalog.count(*) FILTER (WHERE h.state = 'dead') AS dead_5m,
           pg_catalog.count(*) FILTER (WHERE h.state = 'cancelled') AS cancelled_5m,
           pg_catalog.percentile_cont(0.5) WITHIN GROUP (
               ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p50,
           pg_catalog.percentile_cont(0.95) WITHIN GROUP (
               ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p95,
           pg_catalog.percentile_cont(0.99) WITHIN GROUP (
               ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p99
    FROM pgsched.job_history h
    WHERE h.finished_at > pg_catalog.now() - interval '5 minutes'
    GROUP BY h.queue
), names AS (
    SELECT a.queue FROM active a
    UNION SELECT r.queue FROM recent r
    UNION SELECT q.name FROM pgsched.queues q
)
SELECT n.queue,
       coalesce(q.paused, false) AS paused,
       coalesce(a.scheduled, 0) AS scheduled,
       coalesce(a.available, 0) AS available,
       coalesce(a.running, 0) AS running,
       coalesce(a.retrying, 0) AS retrying,
       coalesce(a.lease_expired, 0) AS lease_expired,
       coalesce(EXTRACT(EPOCH FROM pg_catalog.now() - a.oldest_due_at), 0)::double precision AS oldest_due_age_s,
       coalesce(r.completed_5m, 0) AS completed_5m,
       coalesce(r.dead_5m, 0) AS dead_5m,
       coalesce(r.cancelled_5m, 0) AS cancelled_5m,
       round((coalesce(r.completed_5m, 0) / 300.0)::numeric, 2)::double precision AS completed_per_s,
       r.lag_p50::double precision AS lag_p50_s,
       r.lag_p95::double precision AS lag_p95_s,
       r.lag_p99::double precision AS lag_p99_s,
       coalesce(a.claimed, 0) AS claimed,
       coalesce(a.waiting, 0) AS waiting
FROM names n
LEFT JOIN active a ON a.queue = n.queue
LEFT JOIN recent r ON r.queue = n.queue
LEFT JOIN pgsched.queues q ON q.name = n.queue;
COMMENT ON VIEW pgsched.queue_stats IS
    'Per queue: depth by state (running: handler started; claimed: leased, waiting for a slot; waiting: for dependencies), oldest due job age, retries waiting, expired leases, and the last 5 minutes of finished work with start-lag percentiles (seconds).';

-- dead_letters: jobs whose latest outcome is dead and that were not redriven.
CREATE OR REPLACE VIEW pgsched.dead_letters AS
SELECT h.id, h.queue, h.task, h.args, h.attempt, h.max_attempts, h.error, h.finished_at AS died_at,
       h.created_at, h.idempotency_key, h.tenant, h.labels, h.leased_by AS last_worker
FROM pgsched.job_history h
WHERE h.state = 'dead'
  AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
  AND NOT EXISTS (SELECT 1 FROM pgsched.job_history h2 WHERE h2.id = h.id AND h2.finished_at > h.finished_at);
COMMENT ON VIEW pgsched.dead_letters IS
    'Dead jobs awaiting a decision: SELECT pgsched.retry(id) redrives one.';

-- workers_live: workers seen in the last minute, with what they hold now:
-- jobs whose handler runs, and jobs claimed that wait for a slot.
CREATE OR REPLACE VIEW pgsched.workers_live AS
SELECT w.name, w.host, w.pid, w.queues, w.labels, w.concurrency, w.started_at, w.last_seen,
       EXTRACT(EPOCH FROM pg_catalog.now() - w.last_seen)::double precision AS seen_s_ago,
       (SELECT pg_catalog.count(*) FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.leased_by = w.name AND j.started_at IS NOT NULL) AS running, w.version,
       (SELECT pg_catalog.count(*) FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.leased_by = w.name AND j.started_at IS NULL) AS claimed
FROM pgsched.workers w
WHERE w.last_seen > pg_catalog.now() - interval '1 minute';
COMMENT ON VIEW pgsched.workers_live IS 'Workers that reported within the last minute.';

-- schedule_status: each schedule with its next occurrence, its last finished
-- run, and why it cannot fire when it cannot.
CREATE OR REPLACE VIEW pgsched.schedule_status AS
SELECT s.name, s.cron, s.timezone, s.task, s.queue, s.enabled, s.concurrency, s.misfire_policy,
       s.gap_policy, s.overlap_policy, s.expanded_until, s.version, s.last_error,
       (SELECT pg_catalog.min(j.run_at) FROM pgsched.jobs j
        WHERE j.schedule = s.name AND j.state = 'scheduled') AS next_fire_at,
       (SELECT pg_catalog.count(*) FROM pgsched.jobs j
        WHERE j.schedule = s.name AND j.state IN ('available', 'running')) AS in_flight,
       last.finished_at AS last_finished_at, last.state AS last_state
FROM pgsched.schedules s
LEFT JOIN LATERAL (
    SELECT h.finished_at, h.state FROM pgsched.job_history h
    WHERE h.schedule = s.name ORDER BY h.finished_at DESC LIMIT 1
) last ON true;
COMMENT ON VIEW pgsched.schedule_status IS
    'Schedules with their next occurrence, runs in flight, the last outcome and any expansion error.';

-- queue_history: the per-minute rollup (see rollup_queue_history), with the
-- rates and failure totals charts draw. Counts are of the minute; depth and
-- the oldest due age were sampled during it (NULL when nobody sampled);
-- percentiles are of the jobs that finished in it. `final` says the minute
-- was rolled up after it ended (its counts will not change).
CREATE OR REPLACE VIEW pgsched.queue_history AS
SELECT m.minute, m.queue, m.completed, m.failed, m.dead, m.cancelled, m.retried, m.expired,
       m.failed + m.dead + m.expired AS failures,
       round((m.completed / 60.0)::numeric, 3)::double precision AS completed_per_s,
       m.available, m.scheduled, m.running, m.oldest_due_age_s,
       m.lag_p50_s, m.lag_p95_s, m.lag_p99_s, m.run_p50_s, m.run_p95_s, m.run_p99_s,
       m.rolled_at, m.rolled_at >= m.minute + interval '70 seconds' AS final
FROM pgsched.queue_minutes m;
COMMENT ON VIEW pgsched.queue_history IS
    'Per minute and queue: completed, failed (retried runs), dead, cancelled, redriven, expired leases, sampled depth, start-lag and run-time percentiles (seconds).';

-- Privileges as a fresh install gives them (functions created anew above
-- start with PUBLIC EXECUTE; the view file resets the views' options).
REVOKE ALL ON pgsched.job_dependencies FROM PUBLIC;
GRANT SELECT ON pgsched.job_dependencies TO pgsched_worker;
REVOKE EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many, pgsched.start, pgsched.claim, pgsched.fail,
    pgsched._fail_overdue, pgsched.enqueue_command, pgsched.enqueue_service, pgsched._check_command_task,
    pgsched._depend, pgsched._release, pgsched._release_dependents, pgsched._fail_dependents FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many, pgsched.enqueue_service TO pgsched_enqueue;
GRANT EXECUTE ON FUNCTION pgsched.start, pgsched.claim, pgsched.fail TO pgsched_worker;
GRANT USAGE ON SCHEMA pgsched TO pgsched_command;
GRANT EXECUTE ON FUNCTION pgsched.enqueue_command, pgsched.schema_revision TO pgsched_command;
GRANT INSERT (timeout, service, trace_context) ON pgsched.jobs TO pgsched_enqueue;
ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);
ALTER VIEW pgsched.queue_history SET (security_invoker = true);
