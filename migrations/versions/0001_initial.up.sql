-- Frozen copy of sql/ as of revision 0001. Never edit: add a revision.
-- 00_schema.sql
-- pgsched: schema, roles, sequences, types and the install-time configuration.
--
-- The shard count is fixed at install. `pgsched migrate --shards N` sets the
-- session setting `pgsched.install_shards` before these files run; without it
-- the default is 8.

CREATE SCHEMA IF NOT EXISTS pgsched;
COMMENT ON SCHEMA pgsched IS
    'pgsched: a job queue and scheduler whose API is SQL functions. Tables are readable; write through functions (or the documented INSERT INTO pgsched.jobs).';

-- Roles are cluster-wide: create them only when missing so two databases on
-- one server can both hold a pgsched schema.
DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['pgsched_enqueue', 'pgsched_worker', 'pgsched_admin', 'pgsched_tenant_scoped',
                                   'pgsched_command'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
        END IF;
    END LOOP;
END
$$;

-- Ids and fencing tokens each come from one sequence, so both only grow.
CREATE SEQUENCE pgsched.jobs_id_seq AS bigint;
CREATE SEQUENCE pgsched.lease_token_seq AS bigint;
-- Orders audit events written in one transaction (they share `at`).
CREATE SEQUENCE pgsched.job_events_seq AS bigint;

CREATE TYPE pgsched.job_state AS ENUM (
    'scheduled',   -- waiting for run_at
    'waiting',     -- waiting for its dependencies (pgsched.job_dependencies)
    'available',   -- due, claimable
    'running',     -- leased to a worker under a fencing token
    'completed',   -- terminal: the handler returned
    'dead',        -- terminal: attempts exhausted, unknown task, or given up
    'cancelled'    -- terminal: cancelled before or while running
);

-- One row. Changed with UPDATE by an administrator; read by the functions.
CREATE TABLE pgsched.config (
    singleton             boolean     PRIMARY KEY DEFAULT true,
    shards                smallint    NOT NULL,
    max_payload_bytes     integer     NOT NULL DEFAULT 1048576,
    default_max_attempts  integer     NOT NULL DEFAULT 5,
    backoff_base          interval    NOT NULL DEFAULT '2 seconds',
    backoff_max           interval    NOT NULL DEFAULT '1 hour',
    backoff_jitter        real        NOT NULL DEFAULT 0.25,
    history_retention     interval    NOT NULL DEFAULT '14 days',
    events_retention      interval    NOT NULL DEFAULT '14 days',
    idempotency_retention interval    NOT NULL DEFAULT '14 days',
    partitions_ahead      integer     NOT NULL DEFAULT 3,
    audit                 boolean     NOT NULL DEFAULT true,
    events                boolean     NOT NULL DEFAULT true,  -- NOTIFY pgsched_events per terminal transition
    queue_history_retention interval  NOT NULL DEFAULT '30 days',
    timeout_grace         interval    NOT NULL DEFAULT '5 seconds',  -- past a run's deadline_at before housekeeping fails it
    max_handbacks         integer     NOT NULL DEFAULT 3,  -- shutdown hand-backs of an unfinished run before it is dead
    command_timeout_margin interval   NOT NULL DEFAULT '30 seconds',  -- a command job's timeout column: its timeout + this
    -- a job whose task no live worker of its queue has registered for this long goes dead (pgsched.pass_over)
    unserved_task_timeout interval    NOT NULL DEFAULT '10 minutes',
    -- Resource limits of each run (docs/commands.md): MiB of memory and CPUs,
    -- the defaults of enqueue_command / enqueue_service; NULL: unlimited.
    command_memory_limit  integer     DEFAULT 512,
    command_cpu_limit     real        DEFAULT 1.0,
    service_memory_limit  integer     DEFAULT 1024,
    service_cpu_limit     real        DEFAULT 2.0,
    CONSTRAINT config_singleton CHECK (singleton),
    CONSTRAINT config_shards_range CHECK (shards BETWEEN 1 AND 256),
    CONSTRAINT config_max_payload_positive CHECK (max_payload_bytes > 0),
    CONSTRAINT config_default_max_attempts_positive CHECK (default_max_attempts > 0),
    CONSTRAINT config_backoff_order CHECK (backoff_base > interval '0' AND backoff_max >= backoff_base),
    CONSTRAINT config_backoff_jitter_range CHECK (backoff_jitter >= 0 AND backoff_jitter <= 1),
    CONSTRAINT config_partitions_ahead_range CHECK (partitions_ahead BETWEEN 1 AND 60),
    CONSTRAINT config_max_payload_range CHECK (max_payload_bytes <= 268435456),
    CONSTRAINT config_default_max_attempts_range CHECK (default_max_attempts <= 1000000),
    CONSTRAINT config_backoff_max_range CHECK (backoff_max <= interval '365 days'),
    CONSTRAINT config_retention_range CHECK (
        history_retention BETWEEN interval '0' AND interval '100 years'
        AND events_retention BETWEEN interval '0' AND interval '100 years'
        AND idempotency_retention BETWEEN interval '0' AND interval '100 years'),
    CONSTRAINT config_timeout_grace_range CHECK (timeout_grace BETWEEN interval '0' AND interval '1 day'),
    CONSTRAINT config_max_handbacks_range CHECK (max_handbacks BETWEEN 0 AND 1000000),
    CONSTRAINT config_command_timeout_margin_range CHECK (
        command_timeout_margin BETWEEN interval '2 seconds' AND interval '1 day'),
    CONSTRAINT config_unserved_task_timeout_range CHECK (
        unserved_task_timeout BETWEEN interval '1 second' AND interval '365 days'),
    -- NULL (unlimited) passes; NaN is above every number, so it fails.
    CONSTRAINT config_resource_limits_range CHECK (
        command_memory_limit BETWEEN 4 AND 4194304 AND service_memory_limit BETWEEN 4 AND 4194304
        AND command_cpu_limit BETWEEN 0.01::real AND 1024 AND service_cpu_limit BETWEEN 0.01::real AND 1024)
);
COMMENT ON TABLE pgsched.config IS 'Install-wide settings (one row). shards is fixed at install (tg_config__before_update refuses a change).';

INSERT INTO pgsched.config (shards)
VALUES (coalesce(nullif(pg_catalog.current_setting('pgsched.install_shards', true), '')::smallint, 8));

-- 10_tables.sql
-- pgsched: tables.
--
-- Active jobs live in pgsched.jobs, LIST-partitioned by shard; a job never
-- changes shard while it is active, so no transition moves a row between
-- partitions. Finishing a job moves it, in the statement that finishes it,
-- to pgsched.job_history (RANGE-partitioned by day). Every transition that
-- the job's row cannot tell (failures, retries, snoozes, expiries, cancels,
-- hand-backs, and the claims of those attempts) adds a row to
-- pgsched.job_events (also by day); pgsched.job_timeline gives them all.
-- Retention drops partitions; it never runs a mass DELETE.

CREATE TABLE pgsched.jobs (
    -- Fixed widths first, widest first, then the texts and the rest (mostly
    -- NULL): no alignment padding in a new row. The lease last (see there).
    id                  bigint            NOT NULL DEFAULT pg_catalog.nextval('pgsched.jobs_id_seq'),
    run_at              timestamptz       NOT NULL DEFAULT pg_catalog.now(),
    created_at          timestamptz       NOT NULL DEFAULT pg_catalog.now(),
    dispatch_at         timestamptz       NOT NULL,  -- run_at (fairness: a virtual time), minus priority x aging
    priority            integer           NOT NULL DEFAULT 0,
    max_attempts        integer,          -- NULL on insert means: the task's, else the install default
    dispatch_rank       integer           NOT NULL,  -- -priority under strict priority, else 0
    handbacks           integer           NOT NULL DEFAULT 0,  -- runs handed back unfinished at shutdown
    shard               smallint          NOT NULL DEFAULT 0,  -- replaced at install (random shard)
    service             boolean           NOT NULL DEFAULT false,  -- runs until cancelled (docs/services.md)
    queue               text              NOT NULL DEFAULT 'default',
    task                text              NOT NULL,
    args                jsonb             NOT NULL DEFAULT '{}',
    labels              text[]            NOT NULL DEFAULT '{}',
    -- Claim order, stamped by tg_jobs__dispatch from the queue's policy when
    -- the row is written or its run_at/priority changes, never by a sweep:
    -- (dispatch_group, dispatch_rank, dispatch_at, id) ascending. No
    -- defaults: a row without dispatch_at is one the trigger must stamp.
    dispatch_group      text              NOT NULL,  -- '*' under tenant fairness, else ''
    tenant              text,
    idempotency_key     text,
    schedule            text,             -- the recurring schedule this occurrence belongs to
    concurrency_key     text,             -- e.g. 'customer:42': per-key limits of the queue (docs/dispatch.md)
    cancel_requested_at timestamptz,
    unserved_since      timestamptz,      -- passed over (pgsched.pass_over) while no live worker knew its task, since
    timeout             interval,         -- time limit of each run; NULL: the task's (pgsched.tasks), else none
    trace_context       jsonb,            -- the enqueuer's trace (W3C traceparent/tracestate), continued by the run
    last_error          text,
    depends_on          bigint[],         -- the jobs it waited for (enqueue's depends_on): dependency_outcomes()
    waits_for           integer,          -- its job_dependencies rows left (waiting; NULL: count them, see _release)
    -- The handler's last ctx.progress() report, of whichever attempt made it;
    -- written only by pgsched.report_progress, which checks it (no CHECK here:
    -- each costs every INSERT).
    progress            real,             -- 0 to 1
    progress_note       text,
    progress_at         timestamptz,
    -- Durable steps' results (ctx.step, pgsched.record_step): a JSON array of
    -- {name, result, at, attempt, token, worker} in the order they finished (docs/steps.md).
    steps               jsonb,
    -- A service's resource limits (enqueue_service; a command's are in its args): MiB and CPUs, NULL: none.
    memory_limit        integer,
    cpu_limit           real,
    -- The lease, last and in this order: these are the columns a claim writes,
    -- so its WAL record carries only the row's tail (an update's record omits
    -- the bytes before and after what changed, when the new version stays on
    -- its page: the partitions' fillfactor, 99_bootstrap.sql). Fixed widths
    -- first, the one varying width last: nothing after it shifts.
    lease_token         bigint,
    lease_expires_at    timestamptz,
    claimed_at          timestamptz,      -- when the current lease was taken; started_at: when its handler began
    started_at          timestamptz,
    deadline_at         timestamptz,      -- started_at + timeout of the current run, set by pgsched.start()
    -- No default: the owner's enqueue functions name it (0), and a row that
    -- arrives without it is one the insert trigger must see (30_triggers.sql).
    attempt             integer           NOT NULL,
    state               pgsched.job_state NOT NULL DEFAULT 'available',
    leased_by           text,
    CONSTRAINT jobs_pkey PRIMARY KEY (id, shard),
    -- A job's values (task and queue names, args an object, priority, run_at,
    -- attempts, key, tenant, timeout, concurrency key, trace context) have one
    -- owner: _job_problem, _run_options_problem and _check_trace_context,
    -- which every writer runs before it writes (enqueue, enqueue_many, the
    -- commands and services, the scanners' occurrences, retry, and the insert
    -- trigger for a plain INSERT), naming the rule broken (jobs_priority_range
    -- and so on) and the column. They are not CHECKs as well: PostgreSQL reads
    -- a table's CHECKs from the catalog again for every statement that writes
    -- it, and twelve of them cost a single enqueue 35 us of its 240 (and every
    -- claim, start and heartbeat as much). Updates never take a value from a
    -- caller unchecked, and bound what they compute (max_attempts + 1 stays
    -- at most 1000000).
    --
    -- Active states only, and a lease exactly while running: an invariant of
    -- the functions' own writes, which the fencing rests on. One CASE, not
    -- several constraints (each costs every write statement).
    CONSTRAINT jobs_state_valid CHECK (CASE state
        WHEN 'running' THEN lease_token IS NOT NULL AND leased_by IS NOT NULL AND lease_expires_at IS NOT NULL
        WHEN 'available' THEN lease_token IS NULL
        WHEN 'scheduled' THEN lease_token IS NULL
        -- compared as text: an enum value cannot be used in the transaction that adds it (a migration)
        ELSE state::text = 'waiting' AND lease_token IS NULL END)
) PARTITION BY LIST (shard);
COMMENT ON TABLE pgsched.jobs IS
    'Active jobs (scheduled, waiting, available, running), one partition per shard. Plain INSERT with task and args works; everything else goes through functions.';
COMMENT ON COLUMN pgsched.jobs.lease_token IS 'Fencing token of the current lease; every claim draws a new, larger one.';
COMMENT ON COLUMN pgsched.jobs.attempt IS 'Runs started so far (a claim increments it).';
COMMENT ON COLUMN pgsched.jobs.priority IS 'Higher runs first.';
COMMENT ON COLUMN pgsched.jobs.labels IS 'A worker claims a job only if it offers every label of the job.';
COMMENT ON COLUMN pgsched.jobs.timeout IS
    'Time limit of each run (plain INSERT may set it); past deadline_at plus config.timeout_grace, housekeeping fails the run.';
COMMENT ON COLUMN pgsched.jobs.service IS
    'A service job: runs until cancelled, restarted elsewhere when its lease expires (never dead by expiries).';
COMMENT ON COLUMN pgsched.jobs.trace_context IS
    'Trace propagation headers current at enqueue (a JSON object of strings, e.g. traceparent); the run continues that trace.';
COMMENT ON COLUMN pgsched.jobs.started_at IS
    'When the handler of the current attempt started (pgsched.start()); NULL while claimed and waiting for a slot.';

-- Due jobs, in claim order: one small row per 'available' job of
-- pgsched.jobs (its place in the claim order and what a claim filters on),
-- written and removed in the statements that change the job
-- (tg_jobs__ready_rows, tg_jobs__ready_row, claim). Claims read this table,
-- not pgsched.jobs: each claimed job leaves a dead row version here, and
-- while something pins the xmin horizon no vacuum can remove it. So the
-- table is a ring of slots (LIST partitions): new rows go to the current
-- slot (pgsched.ready_ring), the slot changes every second or so, and a slot
-- whose jobs have all been claimed is emptied whole by TRUNCATE
-- (pgsched.rotate_ready), horizon or not: a claim reads the dead entries of
-- the last second or two, not those of every job since the horizon stopped.
--
-- Its slots are UNLOGGED: every row can be derived again from pgsched.jobs
-- (whose rows are durable), so the claim path writes no WAL for it (about a
-- fifth of a job's bytes: the row, its index entry, the claim's row lock and
-- its delete). A crash, or a standby's promotion, leaves the slots empty; so
-- it also empties pgsched.ready_intact, and the first claim() or
-- rotate_ready() that finds it empty fills the ring again from
-- pgsched.jobs (_rebuild_ready). A standby cannot read unlogged tables.
CREATE TABLE pgsched.ready (
    slot            smallint    NOT NULL,
    queue           text        NOT NULL,
    dispatch_group  text        NOT NULL,
    dispatch_rank   integer     NOT NULL,
    dispatch_at     timestamptz NOT NULL,
    id              bigint      NOT NULL,
    shard           smallint    NOT NULL,
    priority        integer     NOT NULL,  -- fair queues undo aging with it (_fair_stamp)
    labels          text[]      NOT NULL,
    tenant          text,
    concurrency_key text
) PARTITION BY LIST (slot);
COMMENT ON TABLE pgsched.ready IS
    'Due jobs in claim order, one row per available job of pgsched.jobs; a ring of slots emptied by TRUNCATE (rotate_ready).';

-- Which slot of pgsched.ready takes new rows (the one with closed_at NULL),
-- and since when each slot has been open or closed (rotate_ready).
CREATE TABLE pgsched.ready_ring (
    slot      smallint    NOT NULL PRIMARY KEY,
    opened_at timestamptz,
    closed_at timestamptz
);
CREATE UNIQUE INDEX ready_ring_current_idx ON pgsched.ready_ring ((true)) WHERE closed_at IS NULL;

-- One row while pgsched.ready holds every available job of pgsched.jobs.
-- Unlogged like the ring's slots: the crash or promotion that empties them
-- empties this too, and the ring is filled again before the next claim
-- (_rebuild_ready).
CREATE UNLOGGED TABLE pgsched.ready_intact (
    intact boolean NOT NULL DEFAULT true PRIMARY KEY CHECK (intact)
);

CREATE TABLE pgsched.job_history (
    -- Fixed widths first, widest first, then the texts and the rest: no
    -- alignment padding in a row (every job writes one).
    id                  bigint            NOT NULL,
    state               pgsched.job_state NOT NULL,
    attempt             integer           NOT NULL,
    finished_at         timestamptz       NOT NULL,
    created_at          timestamptz       NOT NULL,
    run_at              timestamptz       NOT NULL,
    started_at          timestamptz,
    claimed_at          timestamptz,      -- when the last attempt's lease was taken (job_timeline derives its claim)
    lease_token         bigint,
    -- The transaction that filed the row: the position of the event stream
    -- (see pgsched.read_events and docs/events.md).
    finished_xid        xid8              DEFAULT pg_catalog.pg_current_xact_id(),
    priority            integer           NOT NULL,
    max_attempts        integer           NOT NULL,
    shard               smallint          NOT NULL,
    service             boolean           NOT NULL DEFAULT false,
    queue               text              NOT NULL,
    task                text              NOT NULL,
    args                jsonb             NOT NULL,
    labels              text[]            NOT NULL,
    leased_by           text,
    tenant              text,
    idempotency_key     text,
    schedule            text,
    concurrency_key     text,
    result              jsonb,
    error               text,
    timeout             interval,         -- the job's own run limit, given back by a redrive (retry)
    progress            real,             -- the last progress report (jobs.progress)
    progress_note       text,
    progress_at         timestamptz,
    steps               jsonb,            -- durable steps' results (jobs.steps), dropped with the row
    memory_limit        integer,          -- a service's resource limits (jobs.memory_limit, cpu_limit)
    cpu_limit           real,
    CONSTRAINT job_history_state_terminal CHECK (state IN ('completed', 'dead', 'cancelled'))
) PARTITION BY RANGE (finished_at);
COMMENT ON TABLE pgsched.job_history IS
    'Finished jobs (completed, dead, cancelled), partitioned by day of finished_at; retention drops whole days.';

CREATE TABLE pgsched.job_events (
    seq     bigint      NOT NULL DEFAULT pg_catalog.nextval('pgsched.job_events_seq'),
    job_id  bigint      NOT NULL,
    at      timestamptz NOT NULL,
    kind    text        NOT NULL,
    attempt integer,
    worker  text,
    token   bigint,
    detail  jsonb,
    CONSTRAINT job_events_kind_valid CHECK (kind IN (
        'claimed', 'completed', 'failed', 'dead', 'snoozed', 'released', 'cancel_requested',
        'cancelled', 'lease_expired', 'retried', 'lease_lost', 'passed_over'))
) PARTITION BY RANGE (at);
COMMENT ON TABLE pgsched.job_events IS
    'Audit trail by exception: the transitions the job''s row cannot tell (the claim and completion of a job that succeeds are read from job_history); pgsched.job_timeline gives every transition. Partitioned by day.';

-- Idempotency keys deduplicate against active jobs and, until expires_at,
-- finished ones (a key of scope 'active' expires when its job ends). Not partitioned, so the key is unique across all shards.
-- A key belongs to its tenant: each tenant (and no tenant) is its own space.
CREATE TABLE pgsched.idempotency_keys (
    key        text        NOT NULL,
    job_id     bigint      NOT NULL,
    shard      smallint    NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    expires_at timestamptz,  -- NULL while the job is active
    tenant     text,
    -- 'retention': held until expires_at, the retention after the job ended;
    -- 'active': freed when the job ends (enqueue's key_scope).
    scope      text        NOT NULL DEFAULT 'retention',
    CONSTRAINT idempotency_keys_key_tenant UNIQUE NULLS NOT DISTINCT (key, tenant),
    CONSTRAINT idempotency_keys_scope_valid CHECK (scope IN ('active', 'retention'))
);
CREATE INDEX idempotency_keys_expires_at_idx ON pgsched.idempotency_keys (expires_at)
    WHERE expires_at IS NOT NULL;

-- Task policies, registered by workers at start (and by hand if wanted).
-- A policy with tenant NULL is shared by every tenant and set only by an
-- unconfined role; a tenant's own policy (registered by a login bound to it)
-- wins, as a whole, for that tenant's jobs and applies to no other tenant.
CREATE TABLE pgsched.tasks (
    name           text        NOT NULL,
    queue          text        NOT NULL DEFAULT 'default',
    max_attempts   integer,
    backoff_base   interval,
    backoff_max    interval,
    backoff_jitter real,
    updated_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    timeout        interval,
    labels         text[],     -- default labels of the task's jobs (a worker pool); NULL: the queue's
    tenant         text,       -- NULL: every tenant's policy; else that tenant's own
    CONSTRAINT tasks_name_tenant UNIQUE NULLS NOT DISTINCT (name, tenant),
    CONSTRAINT tasks_tenant_length CHECK (pg_catalog.length(tenant) BETWEEN 1 AND 200),
    CONSTRAINT tasks_max_attempts_positive CHECK (max_attempts > 0),
    CONSTRAINT tasks_max_attempts_range CHECK (max_attempts <= 1000000),
    CONSTRAINT tasks_backoff_order CHECK (backoff_base > interval '0' AND backoff_max >= backoff_base),
    CONSTRAINT tasks_backoff_jitter_range CHECK (backoff_jitter >= 0 AND backoff_jitter <= 1),
    CONSTRAINT tasks_timeout_positive CHECK (timeout > interval '0')
);
COMMENT ON TABLE pgsched.tasks IS
    'Per-task policy; a tenant''s own row (tenant) wins for its jobs over the shared one (tenant NULL); NULL columns fall back to pgsched.config.';

-- Queue controls: pause stops claims; backoff overrides the install default;
-- the dispatch policy (set with pgsched.configure_queue, docs/dispatch.md):
-- limits, aging, tenant fairness and default labels. NULL: no such policy.
CREATE TABLE pgsched.queues (
    name           text        PRIMARY KEY,
    paused         boolean     NOT NULL DEFAULT false,
    backoff_base   interval,
    backoff_max    interval,
    updated_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    concurrency     integer,   -- at most this many jobs leased at once, across workers
    key_concurrency integer,   -- at most this many per concurrency_key
    rate            integer,   -- at most this many starts per rate_period
    key_rate        integer,   -- at most this many starts per rate_period per concurrency_key
    rate_period     interval,
    aging           interval,  -- a waiting job gains one priority step per aging; NULL: strict priority
    tenant_fairness boolean    NOT NULL DEFAULT false,  -- claims share the queue between tenants
    tenant_weights  jsonb,     -- under fairness: tenant -> weight (0.001 <= w <= 1000; missing: 1)
    labels          text[],    -- default labels of the queue's jobs (a worker pool)
    CONSTRAINT queues_name_valid CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$'),
    CONSTRAINT queues_backoff_order CHECK (backoff_base > interval '0' AND backoff_max >= backoff_base),
    CONSTRAINT queues_concurrency_range CHECK (concurrency BETWEEN 1 AND 1000000 AND key_concurrency BETWEEN 1 AND 1000000),
    CONSTRAINT queues_rate_range CHECK (rate BETWEEN 1 AND 10000 AND key_rate BETWEEN 1 AND 10000),
    CONSTRAINT queues_rate_period CHECK (
        (rate_period IS NOT NULL) = (rate IS NOT NULL OR key_rate IS NOT NULL)
        AND rate_period BETWEEN interval '1 millisecond' AND interval '1 day'),
    CONSTRAINT queues_aging_range CHECK (aging BETWEEN interval '1 millisecond' AND interval '1 day')
);

-- Recent starts of rate-limited queues (rate_key '') and keys: the start
-- times inside the last rate_period, oldest first, at most rate of them.
-- Written only by claims (pgsched._claim_limited), under the queue's lock.
CREATE TABLE pgsched.rate_windows (
    queue    text          NOT NULL,
    rate_key text          NOT NULL,
    starts   timestamptz[] NOT NULL DEFAULT '{}',
    CONSTRAINT rate_windows_pkey PRIMARY KEY (queue, rate_key)
);
COMMENT ON TABLE pgsched.rate_windows IS
    'Start times within the last rate_period of each rate-limited queue ('''') and concurrency key; written by claims.';

-- Live workers, for operators (workers_live) and for the "is anyone there" checks.
CREATE TABLE pgsched.workers (
    name       text        PRIMARY KEY,
    host       text,
    pid        integer,
    queues     text[]      NOT NULL DEFAULT '{}',
    labels     text[]      NOT NULL DEFAULT '{}',
    concurrency integer,
    started_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_seen  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    running    integer     NOT NULL DEFAULT 0,
    version    text,
    tasks      text[],     -- the tasks it runs; NULL: not reported (taken as any task)
    resource_limits text   -- how it limits command runs (cgroup v2/v1, rlimit); NULL: it runs none
);

-- Per-minute, per-queue rollup of finished work, failures, start lag, run time
-- and depth: the source of charts over time (read it through the view
-- pgsched.queue_history). Written only by pgsched.rollup_queue_history(),
-- which scanners and workers call; partitioned by day like job_history.
CREATE TABLE pgsched.queue_minutes (
    minute           timestamptz NOT NULL,  -- start of the UTC minute
    queue            text        NOT NULL,
    completed        integer     NOT NULL DEFAULT 0,
    failed           integer     NOT NULL DEFAULT 0,  -- failed runs sent back for another attempt
    dead             integer     NOT NULL DEFAULT 0,
    cancelled        integer     NOT NULL DEFAULT 0,
    retried          integer     NOT NULL DEFAULT 0,  -- dead or cancelled jobs redriven by retry()
    expired          integer     NOT NULL DEFAULT 0,  -- leases that expired
    available        integer,                         -- depth sampled during the minute; NULL: not sampled
    scheduled        integer,
    running          integer,
    oldest_due_age_s double precision,
    lag_p50_s        double precision,                -- start lag (start - due) of the jobs finished
    lag_p95_s        double precision,
    lag_p99_s        double precision,
    run_p50_s        double precision,                -- run time (finish - start) of the jobs finished
    run_p95_s        double precision,
    run_p99_s        double precision,
    rolled_at        timestamptz NOT NULL,
    CONSTRAINT queue_minutes_pkey PRIMARY KEY (minute, queue)
) PARTITION BY RANGE (minute);
COMMENT ON TABLE pgsched.queue_minutes IS
    'Per-minute, per-queue rollup written by pgsched.rollup_queue_history(); read pgsched.queue_history.';

-- Tenant bindings: a login role listed here is confined to its tenant on
-- every path, whatever it SET ROLEs to or sets (see _tenant_scope).
-- Maintained with pgsched.bind_tenant() and pgsched.unbind_tenant().
CREATE TABLE pgsched.tenant_roles (
    role     regrole     PRIMARY KEY,
    tenant   text        NOT NULL,
    bound_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT tenant_roles_tenant_length CHECK (pg_catalog.length(tenant) BETWEEN 1 AND 200)
);
COMMENT ON TABLE pgsched.tenant_roles IS
    'Login roles confined to one tenant (bind_tenant / unbind_tenant); decided from session_user, so SET ROLE changes nothing.';

-- Job dependencies: one row per dependency a waiting job still waits for.
-- The row goes when its dependency completes, and the job is due in that
-- transaction when its last row went (see _release_dependents). Keyed by
-- depends_on, so a completion finds its dependents, or that it has none, in
-- one index probe. on_failure is the dependent's policy for a dependency that
-- ends dead or cancelled: 'cancel' it (and its own dependents), 'wait'
-- for a redrive (pgsched.retry of the dependency), or 'run': the row goes
-- as for a completion (a batch callback runs once all finished).
-- Each row goes in one index probe, and the dependent's release looks for
-- any row left: finishing the last member of a batch of 10,000 writes as
-- much as finishing the first.
CREATE TABLE pgsched.job_dependencies (
    depends_on bigint   NOT NULL,
    job        bigint   NOT NULL,
    job_shard  smallint NOT NULL,
    on_failure text     NOT NULL DEFAULT 'cancel',
    CONSTRAINT job_dependencies_pkey PRIMARY KEY (depends_on, job),
    CONSTRAINT job_dependencies_on_failure_valid CHECK (on_failure IN ('cancel', 'wait', 'run'))
);
COMMENT ON TABLE pgsched.job_dependencies IS
    'Unmet dependencies of waiting jobs (job waits for depends_on); written by enqueue and the functions that finish jobs.';

-- functions/_valid_timezone.sql
-- _valid_timezone
-- contract: true when p_tz is an IANA zone key both PostgreSQL and cron.py
-- (the pinned tzdata package) accept: 'Europe/Berlin', 'UTC', 'Etc/GMT-5'.
-- Offsets like '+05:00' and the host-specific names cron.py refuses
-- ('localtime', 'posixrules', 'Factory', 'posix/...', 'right/...') are refused.
CREATE OR REPLACE FUNCTION pgsched._valid_timezone(p_tz text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT p_tz IS NOT NULL
       AND p_tz ~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$'
       AND p_tz !~ '^(localtime|posixrules|Factory)$' AND p_tz !~ '^(posix|right)/'
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = p_tz)
$$;

-- functions/_shard_for_key.sql
-- _shard_for_key
-- contract: the shard of a job with this idempotency key; stable for a given
-- key and shard count, so a key always lands on the same shard.
CREATE OR REPLACE FUNCTION pgsched._shard_for_key(p_key text)
RETURNS smallint
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_key IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT ((pg_catalog.hashtextextended(p_key, 0) % c.shards + c.shards) % c.shards)::smallint
            FROM pgsched.config c);
END
$$;

-- 15_scheduling.sql
-- pgsched: scanners, the shard leases they hold, and recurring schedules.
--
-- Scanners split the shards between them through leases in
-- pgsched.shard_leases. Taking a shard over raises its epoch; every write a
-- scanner makes for a shard first locks that shard's lease row FOR SHARE with
-- the owner and epoch it believes it holds, so a scanner that was paused or
-- cut off and then replaced has its writes rejected (SQLSTATE PS409).

CREATE TABLE pgsched.scanners (
    name       text        PRIMARY KEY,
    host       text,
    pid        integer,
    started_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_seen  timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE pgsched.scanners IS 'Scanner processes, for the fair share of shards each should own.';

CREATE TABLE pgsched.shard_leases (
    shard      smallint    PRIMARY KEY,
    owner      text,
    epoch      bigint      NOT NULL DEFAULT 0,
    expires_at timestamptz,
    renewed_at timestamptz,
    CONSTRAINT shard_leases_owner_iff_expiry CHECK ((owner IS NULL) = (expires_at IS NULL))
);
COMMENT ON TABLE pgsched.shard_leases IS
    'Which scanner owns which shard until when; epoch grows at every change of owner.';

CREATE TABLE pgsched.schedules (
    name             text        PRIMARY KEY,
    cron             text        NOT NULL,
    timezone         text        NOT NULL DEFAULT 'UTC',
    task             text        NOT NULL,
    args             jsonb       NOT NULL DEFAULT '{}',
    queue            text        NOT NULL DEFAULT 'default',
    priority         integer     NOT NULL DEFAULT 0,
    max_attempts     integer,
    labels           text[]      NOT NULL DEFAULT '{}',
    tenant           text,
    gap_policy       text        NOT NULL DEFAULT 'run',
    overlap_policy   text        NOT NULL DEFAULT 'once',
    misfire_policy   text        NOT NULL DEFAULT 'latest',
    misfire_cap      integer     NOT NULL DEFAULT 100,
    misfire_grace    interval    NOT NULL DEFAULT '1 minute',
    concurrency      text        NOT NULL DEFAULT 'skip',
    enabled          boolean     NOT NULL DEFAULT true,
    horizon          interval    NOT NULL DEFAULT '1 hour',
    shard            smallint    NOT NULL,
    version          integer     NOT NULL DEFAULT 1,
    expanded_version integer     NOT NULL DEFAULT 0,
    expanded_until   timestamptz,
    last_error       text,
    source           text        NOT NULL DEFAULT 'sql',
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT schedules_name_valid CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$'),
    CONSTRAINT schedules_cron_shape CHECK (cron ~ '^\s*(@[a-z]+|\S+(\s+\S+){4,5})\s*$'),
    CONSTRAINT schedules_timezone_valid CHECK (pgsched._valid_timezone(timezone)),
    CONSTRAINT schedules_task_valid CHECK (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$'),
    CONSTRAINT schedules_queue_valid CHECK (queue ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$'),
    CONSTRAINT schedules_args_is_object CHECK (pg_catalog.jsonb_typeof(args) = 'object'),
    CONSTRAINT schedules_max_attempts_positive CHECK (max_attempts > 0),
    CONSTRAINT schedules_max_attempts_range CHECK (max_attempts <= 1000000),
    CONSTRAINT schedules_gap_policy_valid CHECK (gap_policy IN ('run', 'skip')),
    CONSTRAINT schedules_overlap_policy_valid CHECK (overlap_policy IN ('once', 'twice')),
    CONSTRAINT schedules_misfire_policy_valid CHECK (misfire_policy IN ('skip', 'latest', 'all')),
    CONSTRAINT schedules_misfire_cap_range CHECK (misfire_cap BETWEEN 1 AND 10000),
    CONSTRAINT schedules_misfire_grace_range CHECK (misfire_grace >= interval '0'),
    CONSTRAINT schedules_concurrency_valid CHECK (concurrency IN ('allow', 'skip', 'queue', 'replace')),
    CONSTRAINT schedules_horizon_range CHECK (horizon BETWEEN interval '1 minute' AND interval '7 days'),
    CONSTRAINT schedules_source_valid CHECK (source IN ('sql', 'cli', 'code'))
);
COMMENT ON TABLE pgsched.schedules IS
    'Recurring schedules: a cron expression in an IANA time zone, expanded by scanners into ordinary jobs.';
COMMENT ON COLUMN pgsched.schedules.gap_policy IS
    'A local time that does not exist (DST spring forward): run at the first valid instant after it, or skip.';
COMMENT ON COLUMN pgsched.schedules.overlap_policy IS
    'A fixed local time that happens twice (DST fall back): run once (first pass) or twice.';
COMMENT ON COLUMN pgsched.schedules.misfire_policy IS
    'Occurrences missed (later than misfire_grace) while nothing ran: skip them, run the latest once, or run all (up to misfire_cap).';
COMMENT ON COLUMN pgsched.schedules.concurrency IS
    'When an occurrence is due while the previous run still goes: allow, skip it, queue one, or replace (cancel) the previous.';

-- One row per occurrence the scanners decided about: what was decided and why.
CREATE TABLE pgsched.schedule_occurrences (
    schedule   text        NOT NULL,
    fire_at    timestamptz NOT NULL,
    nominal    text,
    dst        text,
    decision   text        NOT NULL,
    reason     text,
    job_id     bigint,
    version    integer,
    decided_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT schedule_occurrences_pkey PRIMARY KEY (schedule, fire_at),
    CONSTRAINT schedule_occurrences_decision_valid CHECK (decision IN (
        'fire', 'skipped_gap', 'skipped_misfire', 'skipped_overlap', 'queued', 'replaced_previous',
        'withdrawn', 'started', 'misfire_fired', 'skipped_dst_overlap'))
);
COMMENT ON TABLE pgsched.schedule_occurrences IS
    'Every occurrence of every schedule that scanners decided about, with the decision and the reason.';
CREATE INDEX schedule_occurrences_decided_at_idx ON pgsched.schedule_occurrences (decided_at);

-- 20_indexes.sql
-- pgsched: indexes. Partial indexes keep each path to its own small set of rows:
-- claims never read scheduled or running rows, promotion never reads due ones.

-- Claim: due jobs of a queue in dispatch order (priority, or aged priority;
-- by tenant under fairness: see tg_jobs__dispatch). In pgsched.ready, the
-- due jobs' own table (10_tables.sql), not in pgsched.jobs.
CREATE INDEX ready_claim_idx ON pgsched.ready (queue, dispatch_group, dispatch_rank, dispatch_at, id);
-- Tenant fairness: a tenant's latest stamp in a fair queue, one probe at
-- enqueue (see _fair_stamp); only fair queues' due jobs enter it.
CREATE INDEX ready_fair_idx ON pgsched.ready (queue, (coalesce(tenant, '')), dispatch_at)
    WHERE dispatch_group = '*';
-- Promotion: the earliest scheduled job is one index probe, whatever the backlog.
CREATE INDEX jobs_scheduled_idx ON pgsched.jobs (run_at)
    WHERE state = 'scheduled';
-- Leased jobs per queue and key: what concurrency limits count, and the one
-- index of running jobs (workers_live counts them per worker in one pass
-- over it: a second index by worker cost every claim an entry, ~70 bytes of
-- WAL). Heartbeats change lease_expires_at only, which is in no index, so
-- they can be HOT updates.
CREATE INDEX jobs_running_queue_idx ON pgsched.jobs (queue, concurrency_key)
    WHERE state = 'running';
-- Due jobs that need labels: what the unserved-labels check reads (unlabelled
-- jobs never enter it). On pgsched.jobs, not on the unlogged pgsched.ready:
-- the check runs on read replicas too (stats --read-dsn).
CREATE INDEX jobs_labelled_idx ON pgsched.jobs (queue, labels)
    WHERE state = 'available' AND labels <> '{}';

-- Jobs passed over while no live worker knew their task: what the
-- unserved-tasks check reads (no other job enters it).
CREATE INDEX jobs_unserved_idx ON pgsched.jobs (queue, task)
    WHERE unserved_since IS NOT NULL;

CREATE INDEX job_history_id_idx ON pgsched.job_history (id);
-- Recent history (queue_stats' last five minutes): rows arrive in finished_at
-- order, so a BRIN index finds them for a fraction of a btree's upkeep.
CREATE INDEX job_history_finished_at_idx ON pgsched.job_history USING brin (finished_at);
CREATE INDEX job_history_dead_idx ON pgsched.job_history (finished_at)
    WHERE state = 'dead';
-- The event stream reads history in transaction order from a position
-- (pgsched.read_events), a window of transaction ids at a time. Rows arrive
-- in about that order (a job's history row is filed by the transaction that
-- finishes it), so a BRIN index of the position as a number finds a window's
-- rows for no write per row: a btree cost every job 64 bytes of WAL. A
-- transaction that files rows long after it began widens only its range's
-- summary, and only for windows that reach back to it. Ranges are
-- summarized as they fill (autosummarize), not at the next vacuum.
CREATE INDEX job_history_position_idx ON pgsched.job_history
    USING brin (((finished_xid::text)::bigint)) WITH (autosummarize = on);

CREATE INDEX job_events_job_id_idx ON pgsched.job_events (job_id, seq);
-- The per-minute rollup reads recent events by time; they arrive in order too.
CREATE INDEX job_events_at_idx ON pgsched.job_events USING brin (at);

-- Occurrences of recurring schedules: overlap policies look up a schedule's runs.
CREATE INDEX jobs_schedule_idx ON pgsched.jobs (schedule)
    WHERE schedule IS NOT NULL;

-- A waiting job's own dependencies: dropped with it when it is cancelled.
CREATE INDEX job_dependencies_job_idx ON pgsched.job_dependencies (job);

-- functions/_backoff.sql
-- _backoff
-- contract: the delay before retry number p_attempt + 1 of a job of p_task in
-- p_queue: exponential from base, capped at max, minus up to `jitter` of it
-- at random so retries of a burst spread out. The task's policy wins over the
-- queue's, which wins over the install default; the task policy of the
-- job's tenant (p_tenant) wins over the one every tenant shares.
CREATE OR REPLACE FUNCTION pgsched._backoff(p_task text, p_queue text, p_attempt integer, p_tenant text)
RETURNS interval
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    RETURN (
        SELECT least(p.max, p.base * pg_catalog.power(2, least(greatest(p_attempt, 1) - 1, 40)))
               * (1 - p.jitter * pg_catalog.random())
        FROM (
            SELECT coalesce(t.backoff_base, q.backoff_base, c.backoff_base) AS base,
                   coalesce(t.backoff_max, q.backoff_max, c.backoff_max) AS max,
                   coalesce(t.backoff_jitter, c.backoff_jitter)::double precision AS jitter
            FROM pgsched.config c
            LEFT JOIN LATERAL (SELECT t1.* FROM pgsched.tasks t1
                               WHERE t1.name = p_task AND (t1.tenant IS NULL OR t1.tenant = p_tenant)
                               ORDER BY t1.tenant NULLS LAST LIMIT 1) t ON true
            LEFT JOIN pgsched.queues q ON q.name = p_queue
        ) p);
END
$$;

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
    WHEN p_max_attempts > 1000000 THEN 'jobs_max_attempts_range'
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
        WHEN 'jobs_max_attempts_range' THEN 'max_attempts'
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
        WHEN 'jobs_max_attempts_range' THEN pg_catalog.format(
            'max_attempts %s is out of range (1 to 1000000; NULL means the default)', p_max_attempts)
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

-- functions/_run_options_problem.sql
-- _run_options_problem
-- contract: the name of the rule of pgsched.jobs that a new job's timeout or
-- concurrency_key breaks (jobs_timeout_positive: not positive;
-- jobs_concurrency_key_length: not 1 to 200 characters), NULL when neither
-- does (NULL is allowed for both). The same rules as the table's CHECKs, in
-- one place for _check_run_options and enqueue_many's set-based pass; a plain
-- SQL expression, so the planner inlines it there.
CREATE OR REPLACE FUNCTION pgsched._run_options_problem(p_timeout interval, p_concurrency_key text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE
    WHEN p_timeout <= interval '0' THEN 'jobs_timeout_positive'
    WHEN pg_catalog.length(p_concurrency_key) NOT BETWEEN 1 AND 200 THEN 'jobs_concurrency_key_length'
END
$$;

-- functions/_check_run_options.sql
-- _check_run_options
-- contract: raises check_violation, naming the rule, the column and the
-- value, when a new job's timeout is not positive or its concurrency_key is
-- not 1 to 200 characters (the rules _run_options_problem names: the
-- table's jobs_timeout_positive and jobs_concurrency_key_length, which would
-- name a partition instead). NULL is allowed for both. p_row, 1-based, is the job's position in a batch and
-- leads the message, as in _check_job.
CREATE OR REPLACE FUNCTION pgsched._check_run_options(
    p_timeout interval, p_concurrency_key text, p_row bigint DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_rule text := pgsched._run_options_problem(p_timeout, p_concurrency_key);
    v_prefix text := CASE WHEN p_row IS NULL THEN 'pgsched: ' ELSE pg_catalog.format('pgsched: row %s of the batch: ', p_row) END;
BEGIN
    IF v_rule = 'jobs_timeout_positive' THEN
        RAISE EXCEPTION '%timeout % is not allowed: it must be positive (NULL means none)', v_prefix, p_timeout
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_timeout_positive', COLUMN = 'timeout',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
    IF v_rule = 'jobs_concurrency_key_length' THEN
        RAISE EXCEPTION '%concurrency_key % is not allowed: it must be 1 to 200 characters (NULL means none)',
                v_prefix, pgsched._shown(p_concurrency_key)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_concurrency_key_length', COLUMN = 'concurrency_key',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
END
$$;

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

-- functions/_check_resource_limits.sql
-- _check_resource_limits
-- contract: refuses, with invalid_parameter_value naming the parameter, a
-- resource limit that enqueue_command() or enqueue_service() cannot take:
-- memory_limit (MiB) other than 0 (no limit) or 4 to 4194304 (4 TiB),
-- cpu_limit (CPUs) other than 0 (no limit) or 0.01 to 1024 (NaN and
-- infinity included). NULL (the install default) passes. Bounds as in
-- pgsched.config's config_resource_limits_range.
CREATE OR REPLACE FUNCTION pgsched._check_resource_limits(p_memory_limit integer, p_cpu_limit real)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_memory_limit <> 0 AND p_memory_limit NOT BETWEEN 4 AND 4194304 THEN
        RAISE EXCEPTION 'pgsched: memory_limit % MiB must be 0 (no limit) or 4 to 4194304 MiB (NULL: the default)',
                p_memory_limit
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'memory_limit';
    END IF;
    IF p_cpu_limit <> 0 AND NOT p_cpu_limit BETWEEN 0.01::real AND 1024 THEN
        RAISE EXCEPTION 'pgsched: cpu_limit % must be 0 (no limit) or 0.01 to 1024 CPUs (NULL: the default)', p_cpu_limit
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'cpu_limit';
    END IF;
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

-- functions/_check_trace_context.sql
-- _check_trace_context
-- contract: raises check_violation, naming the rule jobs_trace_context_valid
-- and the column trace_context, unless a job's trace context is NULL or a
-- JSON object of at most 8 KiB as text (the caller's trace propagation
-- headers, docs/otel.md). Run once per writing statement by enqueue(),
-- enqueue_many() and the insert trigger.
CREATE OR REPLACE FUNCTION pgsched._check_trace_context(p_trace_context jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_trace_context IS NOT NULL AND (pg_catalog.jsonb_typeof(p_trace_context) <> 'object'
                                        OR pg_catalog.octet_length(p_trace_context::text) > 8192) THEN
        RAISE EXCEPTION 'pgsched: trace_context must be a JSON object of at most 8192 bytes, not a % of % bytes (jobs_trace_context_valid)',
                pg_catalog.jsonb_typeof(p_trace_context), pg_catalog.octet_length(p_trace_context::text)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_trace_context_valid', COLUMN = 'trace_context',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
END
$$;

-- functions/_cron_value.sql
-- _cron_value
-- contract: one plain value of cron field p_field (see _cron_field): a number
-- within the field's range, or a month / weekday name where the field takes
-- names. Raises invalid_parameter_value otherwise.
CREATE OR REPLACE FUNCTION pgsched._cron_value(p_value text, p_field integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := (ARRAY['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'])[p_field + 1];
    v_lo integer := (ARRAY[0, 0, 0, 1, 1, 0])[p_field + 1];
    v_hi integer := (ARRAY[59, 59, 23, 31, 12, 7])[p_field + 1];
    v_at integer;
BEGIN
    IF p_field = 4 THEN
        v_at := pg_catalog.array_position('{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}'::text[], p_value);
        IF v_at IS NOT NULL THEN
            RETURN v_at;
        END IF;
    ELSIF p_field = 5 THEN
        v_at := pg_catalog.array_position('{SUN,MON,TUE,WED,THU,FRI,SAT}'::text[], p_value);
        IF v_at IS NOT NULL THEN
            RETURN v_at - 1;
        END IF;
    END IF;
    IF p_value !~ '^[0-9]+$' THEN
        RAISE EXCEPTION 'pgsched: cannot parse % field: % is not a number%', v_name, pg_catalog.quote_literal(p_value),
            CASE p_field WHEN 4 THEN ' or JAN-DEC' WHEN 5 THEN ' or SUN-SAT' ELSE '' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_value::numeric NOT BETWEEN v_lo AND v_hi THEN
        RAISE EXCEPTION 'pgsched: % must be %-%, got %', v_name, v_lo, v_hi, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN p_value::integer;
END
$$;

-- functions/_cron_field.sql
-- _cron_field
-- contract: the values one field of a cron expression names, parsed by the
-- rules cron.py applies (cronsim's): '*', numbers, ranges 'a-b', steps '/n',
-- lists, JAN-DEC in the month field, SUN-SAT and 'nL' / 'd#n' in the
-- day-of-week field, 'L' and 'LW' in the day-of-month field (-1000 / -1001).
-- p_field is 0 second, 1 minute, 2 hour, 3 day-of-month, 4 month,
-- 5 day-of-week. Raises invalid_parameter_value naming the field and what is
-- wrong, so SQL refuses exactly what the Python side cannot parse.
CREATE OR REPLACE FUNCTION pgsched._cron_field(p_token text, p_field integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := (ARRAY['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'])[p_field + 1];
    v_lo integer := (ARRAY[0, 0, 0, 1, 1, 0])[p_field + 1];
    v_hi integer := (ARRAY[59, 59, 23, 31, 12, 7])[p_field + 1];
    v_token text := pg_catalog.upper(p_token);
    v_term text;
    v_rest text;
    v_step integer;
    v_items integer[] := '{}';
    v_first integer;
    v_last integer;
BEGIN
    IF v_token = '*' THEN
        RETURN ARRAY(SELECT pg_catalog.generate_series(v_lo, v_hi));
    END IF;
    IF pg_catalog.strpos(v_token, ',') > 0 THEN
        FOREACH v_term IN ARRAY pg_catalog.string_to_array(v_token, ',') LOOP
            v_items := v_items || pgsched._cron_field(v_term, p_field);
        END LOOP;
        RETURN v_items;
    END IF;
    IF p_field = 5 AND pg_catalog.strpos(v_token, 'L') > 0 THEN
        v_term := pg_catalog.left(v_token, -1);
        IF v_term !~ '^[0-9]+$' THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: "nL" (the last such weekday) takes a day number',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY[pgsched._cron_value(v_term, p_field)];
    END IF;
    IF p_field = 5 AND pg_catalog.strpos(v_token, '#') > 0 THEN
        v_term := pg_catalog.split_part(v_token, '#', 1);
        v_rest := pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '#') + 1);
        IF v_rest !~ '^[0-9]+$' OR v_rest::numeric NOT BETWEEN 1 AND 5 THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: "d#n" takes n from 1 to 5',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY[pgsched._cron_value(v_term, p_field)];
    END IF;
    IF pg_catalog.strpos(v_token, '/') > 0 THEN
        v_term := pg_catalog.split_part(v_token, '/', 1);
        v_rest := pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '/') + 1);
        IF v_rest !~ '^[0-9]+$' OR v_rest::numeric = 0 OR v_rest::numeric > 1000000 THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: the step after / must be a positive number',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_step := v_rest::integer;
        v_items := pgsched._cron_field(v_term, p_field);
        IF v_items IN (ARRAY[-1000], ARRAY[-1001]) THEN
            RETURN v_items;
        END IF;
        IF pg_catalog.cardinality(v_items) = 1 THEN
            RETURN ARRAY(SELECT pg_catalog.generate_series(v_items[1], v_hi, v_step));
        END IF;
        RETURN ARRAY(SELECT d.v FROM (SELECT u.v, pg_catalog.row_number() OVER (ORDER BY u.v) AS n
                                      FROM (SELECT DISTINCT x AS v FROM pg_catalog.unnest(v_items) x) u) d
                     WHERE (d.n - 1) % v_step = 0 ORDER BY d.v);
    END IF;
    IF pg_catalog.strpos(v_token, '-') > 0 THEN
        v_first := pgsched._cron_value(pg_catalog.split_part(v_token, '-', 1), p_field);
        v_last := pgsched._cron_value(pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '-') + 1), p_field);
        IF v_last < v_first THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: a range goes from low to high',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY(SELECT pg_catalog.generate_series(v_first, v_last));
    END IF;
    IF p_field = 3 AND v_token = 'LW' THEN
        RETURN ARRAY[-1001];
    END IF;
    IF p_field = 3 AND v_token = 'L' THEN
        RETURN ARRAY[-1000];
    END IF;
    RETURN ARRAY[pgsched._cron_value(v_token, p_field)];
END
$$;

-- functions/_check_schedule.sql
-- _check_schedule
-- contract: refuses a schedule that could never be expanded, before it is
-- written, so one bad schedule cannot fail the scanners' passes: the job
-- table's rules for what its occurrences carry (priority within +-1,000,000,
-- labels without NULL, tenant of 1-200 characters, args within
-- max_payload_bytes, max_attempts > 0), and a cron expression that cron.py
-- parses (5 fields, or 6 with seconds first; each field within its range;
-- Vixie's macros @yearly/@annually, @monthly, @weekly, @daily/@midnight and
-- @hourly; never @reboot) and that can fire at all ('0 0 30 2 *' cannot).
-- The names and the zone: _check_schedule_names, from the table's trigger. Raises
-- check_violation naming the schedules_* constraint, or
-- invalid_parameter_value for a cron expression, with what is wrong.
CREATE OR REPLACE FUNCTION pgsched._check_schedule(
    p_cron         text,
    p_priority     integer,
    p_max_attempts integer,
    p_labels       text[],
    p_tenant       text,
    p_args         jsonb
)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_expr text := pg_catalog.btrim(coalesce(p_cron, ''), E' \t\r\n');
    v_fields text[];
    v_days integer[];
    v_months integer[];
    v_limit integer;
BEGIN
    IF p_priority NOT BETWEEN -1000000 AND 1000000 THEN
        RAISE EXCEPTION 'pgsched: schedule priority % is outside -1000000..1000000 (schedules_priority_range)',
            p_priority USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_priority_range',
                             SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    IF p_max_attempts < 1 THEN
        RAISE EXCEPTION 'pgsched: schedule max_attempts must be at least 1, got % (schedules_max_attempts_positive)',
            p_max_attempts USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_max_attempts_positive',
                                 SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    IF p_tenant IS NOT NULL AND pg_catalog.length(p_tenant) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'pgsched: a schedule tenant is 1 to 200 characters, or NULL for none (schedules_tenant_length)'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_tenant_length',
                  SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    PERFORM pgsched._check_labels(p_labels);
    SELECT c.max_payload_bytes INTO v_limit FROM pgsched.config c;
    PERFORM pgsched._check_payload(p_args, coalesce(v_limit, 1048576));

    IF v_expr LIKE '@%' THEN
        v_expr := CASE pg_catalog.lower(v_expr)
            WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *'
            WHEN '@monthly' THEN '0 0 1 * *' WHEN '@weekly' THEN '0 0 * * 0'
            WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
            WHEN '@hourly' THEN '0 * * * *' END;
        IF v_expr IS NULL THEN
            RAISE EXCEPTION 'pgsched: invalid cron expression %: the only macros are @yearly, @annually, @monthly, '
                            '@weekly, @daily, @midnight and @hourly (@reboot names no instant)',
                pg_catalog.quote_literal(p_cron) USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    v_fields := pg_catalog.regexp_split_to_array(v_expr, E'[ \t\r\n]+');
    IF v_expr = '' OR pg_catalog.cardinality(v_fields) NOT IN (5, 6) THEN
        RAISE EXCEPTION 'pgsched: invalid cron expression %: expected 5 fields (minute hour day-of-month month '
                        'day-of-week) or 6 with seconds first', pg_catalog.quote_literal(p_cron)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(v_fields) = 5 THEN
        v_fields := '0'::text || v_fields;
    END IF;
    FOR i IN 0..5 LOOP
        IF i = 3 THEN
            v_days := pgsched._cron_field(v_fields[i + 1], i);
        ELSIF i = 4 THEN
            v_months := pgsched._cron_field(v_fields[i + 1], i);
        ELSE
            PERFORM pgsched._cron_field(v_fields[i + 1], i);
        END IF;
    END LOOP;
    -- Day-of-month and day-of-week both restricted: either matches (it fires). Otherwise some
    -- month named must have one of the days named (February counts 29).
    IF (v_fields[4] LIKE '*%' OR v_fields[6] LIKE '*%')
       AND (SELECT pg_catalog.min(d) FROM pg_catalog.unnest(v_days) d) >
           (SELECT pg_catalog.max((ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[m])
            FROM pg_catalog.unnest(v_months) m) THEN
        RAISE EXCEPTION 'pgsched: cron expression % can never fire: day % does not occur in month %',
            pg_catalog.quote_literal(p_cron), v_fields[4], v_fields[5] USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- functions/_check_schedule_names.sql
-- _check_schedule_names
-- contract: refuses, before the row is written and with what is wrong, a
-- schedule name, task name or time zone the schedules table's CHECKs would
-- refuse with a bare constraint name and a dump of the row
-- (schedules_name_valid, schedules_task_valid, schedules_timezone_valid).
-- Raises check_violation naming the constraint; the CHECKs stay as the last
-- word. tg_schedules__before_write calls it, so upsert_schedule and a plain
-- INSERT or UPDATE say the same.
CREATE OR REPLACE FUNCTION pgsched._check_schedule_names(p_name text, p_task text, p_timezone text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$' THEN
        RAISE EXCEPTION 'pgsched: invalid schedule name %: 1 to 128 letters, digits, _ . : or -, starting with a '
                        'letter, digit or _ (schedules_name_valid)', coalesce(pg_catalog.quote_literal(p_name), 'NULL')
            USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_name_valid',
                  SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    IF p_task IS NULL OR p_task !~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$' THEN
        RAISE EXCEPTION 'pgsched: invalid task name % for schedule %: 1 to 200 letters, digits, _ . : or -, '
                        'starting with a letter or _ (schedules_task_valid)',
            coalesce(pg_catalog.quote_literal(p_task), 'NULL'), pg_catalog.quote_literal(p_name)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_task_valid',
                  SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
    IF NOT pgsched._valid_timezone(p_timezone) THEN
        RAISE EXCEPTION 'pgsched: unknown time zone % for schedule %: give an IANA zone name such as '
                        '''Europe/Berlin'', ''America/New_York'' or ''UTC'' (not an offset, not ''localtime'') '
                        '(schedules_timezone_valid)',
            coalesce(pg_catalog.quote_literal(p_timezone), 'NULL'), pg_catalog.quote_literal(p_name)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'schedules_timezone_valid',
                  SCHEMA = 'pgsched', TABLE = 'schedules';
    END IF;
END
$$;

-- functions/_tenant_scope.sql
-- _tenant_scope
-- contract: the tenant the current session is confined to, decided from its
-- login (session_user), so neither SET ROLE nor a setting moves it:
--   NULL   not confined: the schema's owner and its members (superusers
--          among them), and logins that are not members of
--          pgsched_tenant_scoped, unless they narrowed themselves with
--          SET pgsched.tenant (a filter they chose, not a boundary);
--   tenant a member of pgsched_tenant_scoped bound to it in
--          pgsched.tenant_roles (bind_tenant()); pgsched.tenant is ignored;
--   ''     a member of pgsched_tenant_scoped that is not bound: confined to
--          nothing (no row has tenant ''). Fails closed.
-- The row-level security policies call it once per statement (InitPlans);
-- SECURITY DEFINER so it may read pgsched.tenant_roles. Unconfined logins
-- pay two role checks and no query: it runs on every claim and enqueue.
CREATE OR REPLACE FUNCTION pgsched._tenant_scope()
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    -- current_user is this function's owner, the schema's owner.
    IF pg_catalog.pg_has_role(session_user, current_user, 'MEMBER') THEN
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, 'pgsched_tenant_scoped', 'MEMBER') THEN
        RETURN nullif(pg_catalog.current_setting('pgsched.tenant', true), '');
    END IF;
    RETURN coalesce((SELECT b.tenant FROM pgsched.tenant_roles b
                     WHERE b.role OPERATOR(pg_catalog.=) pg_catalog.to_regrole(pg_catalog.quote_ident(session_user))),
                    '');
END
$$;

-- functions/_caller_scope.sql
-- _caller_scope
-- contract: _tenant_scope() as the owner's SECURITY DEFINER functions see it,
-- where current_user is the owner: NULL at once for a member of the owner's
-- role (never confined, see _tenant_scope), else _tenant_scope(). A SQL
-- function the planner inlines: such a caller calls no function at all.
-- Only the owner may execute it (90_grants.sql grants it to no role): for any
-- other current_user the shortcut would not mean "the owner".
CREATE OR REPLACE FUNCTION pgsched._caller_scope()
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN pg_catalog.pg_has_role(session_user, current_user, 'MEMBER') THEN NULL
                ELSE pgsched._tenant_scope() END
$$;

-- functions/_check_tenant.sql
-- _check_tenant
-- contract: a session confined to a tenant (see _tenant_scope: a member of
-- pgsched_tenant_scoped, bound with bind_tenant() or, unbound, confined to
-- nothing) may write only rows of that tenant; no
-- tenant is not "any tenant". Raises insufficient_privilege otherwise. The
-- decision follows the login, so SET ROLE and SET pgsched.tenant do not
-- change it for a bound or scoped login.
CREATE OR REPLACE FUNCTION pgsched._check_tenant(p_tenant text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_scope text := pgsched._tenant_scope();
BEGIN
    IF v_scope IS NOT NULL AND p_tenant IS DISTINCT FROM v_scope THEN
        RAISE EXCEPTION 'pgsched: this session is confined to tenant %, not %',
            CASE WHEN v_scope = '' THEN '(none: its login is not bound to a tenant)' ELSE v_scope END,
            coalesce(p_tenant, '(none)')
            USING ERRCODE = 'insufficient_privilege',
                  HINT = CASE WHEN v_scope = '' THEN 'An administrator binds the login: SELECT pgsched.bind_tenant(''login'', ''tenant'').'
                              ELSE 'Name the tenant of this session.' END;
    END IF;
END
$$;

-- functions/_check_schedule_write.sql
-- _check_schedule_write
-- contract: may the session create or replace the schedule p_name with
-- tenant p_tenant and source p_source? Raises insufficient_privilege unless
--   * the new tenant is the session's own when it is confined, and an
--     existing schedule of that name is visible to it (another tenant's
--     schedule is never overwritten); and
--   * a login holding pgsched_worker but not pgsched_admin (a worker
--     registering the schedules its code defines) writes source 'code' only,
--     and replaces only schedules that came from code.
CREATE OR REPLACE FUNCTION pgsched._check_schedule_write(p_name text, p_tenant text, p_source text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_tenant text;
    v_source text;
BEGIN
    PERFORM pgsched._check_tenant(p_tenant);
    SELECT s.tenant, s.source INTO v_tenant, v_source FROM pgsched.schedules s WHERE s.name = p_name;
    IF FOUND AND NOT pgsched._tenant_visible(v_tenant) THEN
        RAISE EXCEPTION 'pgsched: the schedule name % is taken', p_name
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, current_user, 'MEMBER')
       AND NOT pg_catalog.pg_has_role(session_user, 'pgsched_admin', 'MEMBER') THEN
        IF p_source IS DISTINCT FROM 'code' THEN
            RAISE EXCEPTION 'pgsched: a worker login registers only schedules defined in code (source ''code'')'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF FOUND AND v_source <> 'code' THEN
            RAISE EXCEPTION 'pgsched: schedule % was made with source %; only pgsched_admin may replace it',
                p_name, v_source
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
END
$$;

-- functions/_check_unconfined.sql
-- _check_unconfined
-- contract: raises insufficient_privilege when the session is confined to a
-- tenant (see _tenant_scope): what p_action changes is shared by every
-- tenant (queues, task policies, tenant bindings, scanner leases), so only
-- an unconfined login may do it.
CREATE OR REPLACE FUNCTION pgsched._check_unconfined(p_action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF pgsched._tenant_scope() IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: a session confined to a tenant cannot %', p_action
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'It changes what every tenant shares; use a login that is not bound to a tenant.';
    END IF;
END
$$;

-- functions/_check_clock.sql
-- _check_clock
-- contract: p_now, once the caller is found allowed to move the clock: only
-- the schema's owner (and its members, superusers among them). For any other
-- login it raises insufficient_privilege (SQLSTATE 42501): the decision reads
-- session_user, the login, so SET ROLE changes nothing, and it holds inside
-- SECURITY DEFINER functions, where current_user is the owner. Called by
-- _clock for a non-NULL p_now only.
CREATE OR REPLACE FUNCTION pgsched._check_clock(p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF NOT pg_catalog.pg_has_role(
            session_user,
            (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgsched'),
            'MEMBER') THEN
        RAISE EXCEPTION 'pgsched: only the owner of the pgsched schema may move the clock (p_now)'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Leave p_now NULL: the functions use the database clock.';
    END IF;
    RETURN p_now;
END
$$;

-- functions/_clock.sql
-- _clock
-- contract: the moved clock a function was given, checked (_check_clock).
-- p_now exists so tests can move time; only the schema's owner (and its
-- members, superusers among them) may use it. NULL returns NULL (callers
-- coalesce it with their clock). A SQL function the planner inlines: the hot
-- path, where p_now is NULL, calls no function at all.
CREATE OR REPLACE FUNCTION pgsched._clock(p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_now IS NULL THEN NULL ELSE pgsched._check_clock(p_now) END
$$;

-- functions/_depend.sql
-- _depend
-- contract: gives the just-inserted waiting jobs p_ids (on p_shards) their
-- dependencies: p_deps[i] is a JSON array of job ids, and in a batch also of
-- references to earlier rows of it as negative 1-based positions (-1: the
-- first row); p_policies[i] ('cancel', the default, 'wait' or 'run') says
-- what a dead or cancelled dependency does to job i ('run': nothing, it
-- counts as finished). A dependency still active is
-- held (FOR KEY SHARE: it cannot finish before this transaction commits)
-- and becomes a row of pgsched.job_dependencies; one that completed
-- (history) is met; one dead or cancelled applies the policy at once
-- ('cancel': the job is filed cancelled; 'wait': it waits for a redrive;
-- 'run': it is met). In a batch, each job's depends_on column gets its
-- dependencies' ids, references resolved (enqueue() writes its own).
-- A job with nothing left to wait for is made due (_release). A bad
-- element, a reference to the row itself or a later one, an id this
-- session cannot see (another tenant's, or none), or one not smaller than
-- the job's own (ids are drawn in order, so every edge points to an older
-- job and no cycle can form, not even through predicted ids) raises naming
-- the row (p_batch) and the value; the caller's insert is rolled back.
-- Bounds: a job names at most 1000 jobs by id, and one call at most 1000
-- distinct jobs outside its batch (each is locked until commit: the lock
-- table is shared and small); references to rows of the batch (a batch
-- callback's fan-in) are not bounded.
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
    v_max constant integer := 1000;
BEGIN
    SELECT u.ord, c.n INTO v_bad
    FROM unnest(p_deps) WITH ORDINALITY AS u(deps, ord)
    CROSS JOIN LATERAL (
        SELECT pg_catalog.count(*) AS n
        FROM pg_catalog.jsonb_array_elements(u.deps) AS e(v)
        WHERE pg_catalog.jsonb_typeof(e.v) <> 'number' OR e.v::numeric > 0) c
    WHERE pg_catalog.jsonb_typeof(u.deps) = 'array' AND pg_catalog.jsonb_array_length(u.deps) > v_max
      AND c.n > v_max
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: %depends_on names % jobs: a job depends on at most % jobs',
                CASE WHEN p_batch THEN pg_catalog.format('row %s of the batch: ', v_bad.ord) ELSE '' END,
                v_bad.n, v_max
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on',
                  HINT = 'Chain a job that depends on the others in groups, or enqueue the group as one batch.';
    END IF;

    SELECT u.ord, u.deps, u.policy, e.v,
           CASE WHEN u.policy IS NOT NULL AND u.policy NOT IN ('cancel', 'wait', 'run') THEN 'policy'
                WHEN pg_catalog.jsonb_typeof(u.deps) <> 'array' THEN 'shape'
                WHEN pg_catalog.jsonb_typeof(e.v) <> 'number' OR e.v::numeric <> pg_catalog.trunc(e.v::numeric)
                     OR e.v::numeric = 0 OR e.v::numeric > 9223372036854775807 THEN 'element'
                WHEN e.v::numeric < 0 AND (NOT p_batch OR -e.v::numeric >= u.ord) THEN 'reference'
           END AS problem
    INTO v_bad
    FROM unnest(p_deps, p_policies) WITH ORDINALITY AS u(deps, policy, ord)
    LEFT JOIN LATERAL pg_catalog.jsonb_array_elements(
        CASE WHEN pg_catalog.jsonb_typeof(u.deps) = 'array' THEN u.deps END) AS e(v) ON true
    WHERE (u.policy IS NOT NULL AND u.policy NOT IN ('cancel', 'wait', 'run'))
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
            RAISE EXCEPTION 'pgsched: %on_dependency_failure must be ''cancel'', ''wait'' or ''run'', not %',
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

    IF pg_catalog.cardinality(v_outside) > v_max THEN
        RAISE EXCEPTION 'pgsched: depends_on names % jobs outside the batch: one call depends on at most % of them',
                pg_catalog.cardinality(v_outside), v_max
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on',
                  HINT = 'Enqueue the batch in parts, or name jobs of the batch by reference.';
    END IF;
    IF v_outside IS NOT NULL THEN
        -- A redrive (retry) of a dead or cancelled dependency waits for this
        -- transaction (it takes the same lock, exclusively), so a dependency
        -- read from the history below cannot come back and complete unseen.
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('pgsched.depend'), pg_catalog.hashint8(o.id))
        FROM unnest(v_outside) AS o(id)
        ORDER BY o.id;
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

    -- Every edge points to an older job (a smaller id; ids are drawn in
    -- order), so no cycle can form: not on the job itself, not between rows
    -- of this call named by their predicted ids, not through a later job.
    SELECT e.ord, e.dep, e.job INTO v_bad
    FROM unnest(v_ords, v_on, v_jobs) AS e(ord, dep, job)
    WHERE e.dep >= e.job
    ORDER BY e.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: %depends_on %: a job can depend only on jobs enqueued before it (its own id is %)',
                CASE WHEN p_batch THEN pg_catalog.format('row %s of the batch: ', v_bad.ord) ELSE '' END,
                v_bad.dep, v_bad.job
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on',
                  HINT = 'Within a batch, name earlier rows (-1 is the first row): ids grow in enqueue order.';
    END IF;

    -- Rows for every dependency not met: active ones, and failed ones a job waits out
    -- ('run': a dependency dead or cancelled already is met, like a completed one).
    -- Each job counts its rows (waits_for: what _release counts down), and in a
    -- batch learns its dependencies' ids (depends_on: enqueue() wrote its own).
    WITH added AS (
        INSERT INTO pgsched.job_dependencies (depends_on, job, job_shard, on_failure)
        SELECT e.dep, e.job, e.shard, e.policy
        FROM unnest(v_on, v_jobs, v_job_shards, v_on_failure) AS e(dep, job, shard, policy)
        WHERE NOT EXISTS (SELECT 1 FROM unnest(v_met) AS m(id) WHERE m.id = e.dep)
          AND (e.policy = 'wait' OR NOT EXISTS (SELECT 1 FROM unnest(v_failed) AS f(id) WHERE f.id = e.dep))
        RETURNING job
    )
    UPDATE pgsched.jobs j
    SET waits_for = coalesce(n.rows, 0),
        depends_on = CASE WHEN p_batch THEN x.deps ELSE j.depends_on END
    FROM (SELECT e.job, e.shard, pg_catalog.array_agg(e.dep ORDER BY e.dep) AS deps
          FROM unnest(v_jobs, v_job_shards, v_on) AS e(job, shard, dep)
          GROUP BY e.job, e.shard) x
    LEFT JOIN (SELECT a.job, pg_catalog.count(*)::integer AS rows FROM added a GROUP BY a.job) n ON n.job = x.job
    WHERE j.id = x.job AND j.shard = x.shard;

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

-- functions/_ensure_day_partition.sql
-- _ensure_day_partition
-- contract: makes sure p_parent (job_history, job_events or queue_minutes) has a partition
-- for the UTC day p_day. Rows that landed in the default partition for that
-- day (written while the partition was missing) are moved into the new one
-- before it is attached, so nothing is lost and the attach cannot fail on
-- them. Returns true when it created a partition.
CREATE OR REPLACE FUNCTION pgsched._ensure_day_partition(p_parent text, p_day date)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := p_parent || '_p' || pg_catalog.to_char(p_day, 'YYYYMMDD');
    v_key text := CASE p_parent WHEN 'job_history' THEN 'finished_at' WHEN 'job_events' THEN 'at'
                                WHEN 'queue_minutes' THEN 'minute' END;
    v_from timestamptz := (p_day::timestamp AT TIME ZONE 'UTC');
    v_to timestamptz := ((p_day + 1)::timestamp AT TIME ZONE 'UTC');
BEGIN
    IF v_key IS NULL THEN
        RAISE EXCEPTION 'pgsched: % is not a day-partitioned table', p_parent USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.to_regclass(pg_catalog.format('pgsched.%I', v_name)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE TABLE pgsched.%I (LIKE pgsched.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_name, p_parent);
    -- No row may reach the default partition between the move and the attach.
    EXECUTE pg_catalog.format('LOCK TABLE pgsched.%I IN SHARE MODE', p_parent || '_default');
    EXECUTE pg_catalog.format(
        'WITH moved AS (DELETE FROM pgsched.%I WHERE %I >= $1 AND %I < $2 RETURNING *) '
        'INSERT INTO pgsched.%I SELECT * FROM moved',
        p_parent || '_default', v_key, v_key, v_name) USING v_from, v_to;
    EXECUTE pg_catalog.format(
        'ALTER TABLE pgsched.%I ATTACH PARTITION pgsched.%I FOR VALUES FROM (%L) TO (%L)',
        p_parent, v_name, v_from, v_to);
    RETURN true;
END
$$;

-- functions/_event.sql
-- _event
-- contract: appends one audit event when auditing is on.
CREATE OR REPLACE FUNCTION pgsched._event(
    p_job_id  bigint,
    p_at      timestamptz,
    p_kind    text,
    p_attempt integer,
    p_worker  text,
    p_token   bigint,
    p_detail  jsonb DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF (SELECT c.audit FROM pgsched.config c) THEN
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        VALUES (p_job_id, p_at, p_kind, p_attempt, p_worker, p_token, p_detail);
    END IF;
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
-- so scanners and housekeeping workers both enforce deadlines. A command job
-- (its timeout column is the command's timeout + config.command_timeout_margin,
-- see enqueue_command) gets the reason spelt out: 'timed out after 31 s: the
-- command runner did not end the command within the margin of its 1 s timeout'.
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
        SELECT j.id, j.shard, j.lease_token, j.deadline_at - j.started_at AS timeout,
               CASE WHEN j.task = 'pgsched.command' AND pg_catalog.jsonb_typeof(j.args -> 'timeout_s') = 'number'
                    THEN j.args ->> 'timeout_s' END AS command_timeout
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.started_at IS NOT NULL AND j.deadline_at < v_now - v_grace
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        IF pgsched.fail(v_job.id, v_job.lease_token,
                        pg_catalog.format('timed out after %s s',
                            pg_catalog.round(EXTRACT(epoch FROM v_job.timeout), 3)::double precision)
                        || CASE WHEN v_job.command_timeout IS NOT NULL THEN pg_catalog.format(
                            ': the command runner did not end the command within the margin of its %s s timeout',
                            v_job.command_timeout) ELSE '' END,
                        NULL, false, p_now) <> 'lease_lost' THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END
$$;

-- functions/_fair_stamp.sql
-- _fair_stamp
-- contract: the claim-order stamp (dispatch_at before aging) of a job of
-- tenant p_tenant entering fair queue p_queue (tenant_fairness), due at
-- p_at: start-time fair queueing on virtual time. Each tenant's due jobs
-- are spaced 1 ms / weight apart (p_weights: tenant -> weight, missing 1;
-- no tenant is ''), and a tenant with nothing due starts at the head of the
-- queue (its earliest due stamp), not where it left off: an idle tenant
-- banks no credit, and its share goes to the others (work-conserving).
-- With nothing due in the queue, the stamp is p_at. Under aging (p_aging)
-- the claim order is the stamp minus priority x aging; the stamps read back
-- here have that taken off again, so virtual time is one clock for all.
--
-- The cost is here, at enqueue (two index probes: the head in the claim
-- index, the tenant's latest stamp in ready_fair_idx), so a claim of a fair
-- queue is the plain claim of its index in stamp order and reads only its
-- batch, whatever the number of tenants. VOLATILE, so each row of a
-- multi-row INSERT sees the rows before it and the tenant's stamps grow
-- within one statement. Concurrent enqueues of one tenant may draw equal
-- stamps (ids break ties): shares are kept to a job, not exactly.
CREATE OR REPLACE FUNCTION pgsched._fair_stamp(
    p_queue   text,
    p_tenant  text,
    p_weights jsonb,
    p_at      timestamptz,
    p_aging   interval DEFAULT NULL
)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan per statement for every call: planning the partitioned probes
-- anew for each job would cost more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_head timestamptz;
    v_tail timestamptz;
BEGIN
    SELECT j.dispatch_at + coalesce(j.priority * p_aging, interval '0') INTO v_head FROM pgsched.ready j
    WHERE j.queue = p_queue AND j.dispatch_group = '*'
    ORDER BY j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id
    LIMIT 1;
    IF v_head IS NULL THEN
        RETURN p_at;
    END IF;
    SELECT j.dispatch_at + coalesce(j.priority * p_aging, interval '0') INTO v_tail FROM pgsched.ready j
    WHERE j.queue = p_queue AND j.dispatch_group = '*'
      AND coalesce(j.tenant, '') = coalesce(p_tenant, '')
    ORDER BY coalesce(j.tenant, ''), j.dispatch_at DESC
    LIMIT 1;
    RETURN greatest(v_head, v_tail + interval '1 millisecond'
                                      / coalesce((p_weights ->> coalesce(p_tenant, ''))::double precision, 1));
END
$$;

-- functions/_fair_stamps.sql
-- _fair_stamps
-- contract: _fair_stamp for a batch (enqueue_many): element i is the
-- virtual-time stamp of row i (queue p_queues[i], NULL: 'default'; tenant
-- p_tenants[i]; due p_run_ats[i], NULL: p_now) when its queue has tenant
-- fairness, else NULL; p_n rows. One statement: each fair queue's head and
-- each tenant's latest stamp are read once (index probes, rescanned, where
-- a call per row would start an executor over every shard's partition each
-- time), and a tenant's rows follow one another 1 ms / weight apart in
-- input order, as stamping them one by one would place them.
CREATE OR REPLACE FUNCTION pgsched._fair_stamps(
    p_queues  text[],
    p_tenants text[],
    p_run_ats timestamptz[],
    p_now     timestamptz,
    p_n       integer
)
RETURNS timestamptz[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    WITH input AS (
        SELECT u.ord, coalesce(p_queues[u.ord], 'default') AS queue, coalesce(p_tenants[u.ord], '') AS tenant,
               coalesce(p_run_ats[u.ord], p_now) AS run_at
        FROM pg_catalog.generate_series(1, p_n) AS u(ord)
    ), fair AS (
        SELECT i.ord, i.queue, i.tenant, i.run_at, q.aging,
               interval '1 millisecond' / coalesce((q.tenant_weights ->> i.tenant)::double precision, 1) AS step,
               (pg_catalog.row_number() OVER (PARTITION BY i.queue, i.tenant ORDER BY i.ord) - 1)::double precision
                   AS ahead
        FROM input i
        JOIN pgsched.queues q ON q.name = i.queue AND q.tenant_fairness
    ), heads AS (
        SELECT x.queue, h.at
        FROM (SELECT DISTINCT f.queue, f.aging FROM fair f) x
        LEFT JOIN LATERAL (
            SELECT j.dispatch_at + coalesce(j.priority * x.aging, interval '0') AS at
            FROM pgsched.ready j
            WHERE j.queue = x.queue AND j.dispatch_group = '*'
            ORDER BY j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id
            LIMIT 1) h ON true
    ), tails AS (
        SELECT x.queue, x.tenant, t.at + x.step AS at
        FROM (SELECT DISTINCT f.queue, f.tenant, f.aging, f.step FROM fair f) x
        LEFT JOIN LATERAL (
            SELECT j.dispatch_at + coalesce(j.priority * x.aging, interval '0') AS at
            FROM pgsched.ready j
            WHERE j.queue = x.queue AND j.dispatch_group = '*'
              AND coalesce(j.tenant, '') = x.tenant
            ORDER BY coalesce(j.tenant, ''), j.dispatch_at DESC
            LIMIT 1) t ON true
    )
    SELECT pg_catalog.array_agg(
               coalesce(greatest(h.at, t.at), f.run_at) + f.ahead * f.step
               ORDER BY i.ord)
    FROM input i
    LEFT JOIN fair f ON f.ord = i.ord
    LEFT JOIN heads h ON h.queue = f.queue
    LEFT JOIN tails t ON t.queue = f.queue AND t.tenant = f.tenant
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
-- history row in p_state, the audit events of a job that did not complete
-- (the claim of the attempt it was running, if any, then p_state; a
-- completion is read from the history row), the idempotency key's
-- retention clock started (a service's key is freed at once), and the
-- status event on pgsched_events (when
-- pgsched.config.events is on; payload in docs/events.md, the same as
-- complete()'s); a waiting job's dependency rows dropped, and a dead or
-- cancelled job's dependents cancelled or left waiting by their policy
-- (_fail_dependents), or made due ('run', _release_callbacks). Callers do
-- the check-and-write; this only files.
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
         service, claimed_at, concurrency_key, timeout, progress, progress_note, progress_at, steps,
         memory_limit, cpu_limit)
    VALUES (p_job.id, p_job.shard, p_state, p_job.queue, p_job.task, p_job.args, p_job.priority,
            p_job.run_at, p_job.attempt, p_job.max_attempts, p_job.lease_token, p_job.leased_by,
            p_job.idempotency_key, p_job.labels, p_job.tenant, p_job.created_at,
            -- a worker that never called start() (SQL only): the claim is the start;
            -- a job cancelled before its handler started has none
            coalesce(p_job.started_at,
                     CASE WHEN p_job.state = 'running' AND p_state <> 'cancelled' THEN p_job.claimed_at END),
            p_now, p_result, p_error, p_job.schedule, p_job.service, p_job.claimed_at, p_job.concurrency_key,
            p_job.timeout, p_job.progress, p_job.progress_note, p_job.progress_at, p_job.steps,
            p_job.memory_limit, p_job.cpu_limit);
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
    IF p_state <> 'completed'
       AND EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = p_job.id AND d.on_failure = 'run') THEN
        PERFORM pgsched._release_callbacks(p_job.id, p_now);
    END IF;
    IF p_job.idempotency_key IS NOT NULL THEN
        UPDATE pgsched.idempotency_keys k
        -- A service's key, and a key of scope 'active', is free again once
        -- the job ended: the next enqueue starts it anew.
        SET expires_at = CASE WHEN p_job.service OR k.scope = 'active' THEN p_now
                              ELSE p_now + v_config.idempotency_retention END
        WHERE k.key = p_job.idempotency_key AND k.job_id = p_job.id;
    END IF;
END
$$;

-- functions/_hold_shard.sql
-- _hold_shard
-- contract: the fence of every scanner write. Locks the shard's lease row
-- FOR SHARE if, and only if, p_scanner owns it under p_epoch and the lease has
-- not run out; otherwise raises SQLSTATE PS409 and the caller's whole
-- transaction is rolled back. Holding the lock until commit means a takeover
-- (which updates the row) waits for this write to finish, or this write sees
-- the takeover and is rejected: never both. A session confined to a tenant
-- is refused (insufficient_privilege).
CREATE OR REPLACE FUNCTION pgsched._hold_shard(
    p_scanner text,
    p_shard   integer,
    p_epoch   bigint,
    p_now     timestamptz
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_unconfined('run a scanner (scanners act for every tenant)');
    PERFORM 1 FROM pgsched.shard_leases l
    WHERE l.shard = p_shard AND l.owner = p_scanner AND l.epoch = p_epoch AND l.expires_at > p_now
    FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: scanner % no longer holds shard % under epoch %', p_scanner, p_shard, p_epoch
            USING ERRCODE = 'PS409', HINT = 'Another scanner took the shard over; this write was rejected.';
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
-- a batch. Keys are per tenant: p_tenant (NULL: no tenant) names the space. Each statement here takes a new snapshot, so it sees a concurrent
-- holder that the caller's key insert waited for.
CREATE OR REPLACE FUNCTION pgsched._key_holder(
    p_key text, p_task text, p_args jsonb, p_row bigint DEFAULT NULL, p_tenant text DEFAULT NULL
)
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
    SELECT k.job_id, k.shard INTO v_id, v_shard FROM pgsched.idempotency_keys k
    WHERE k.key = p_key AND k.tenant IS NOT DISTINCT FROM p_tenant;
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

-- functions/_key_room.sql
-- _key_room
-- contract: how many more jobs of concurrency key p_key queue p_q may start
-- now under its per-key limits (key_concurrency: leases not expired;
-- key_rate: starts within rate_period), counting p_taken, the room left by
-- the claim in progress (a JSON object key -> room) when it already looked.
-- Called by _claim_limited under the queue's lock.
CREATE OR REPLACE FUNCTION pgsched._key_room(p_q pgsched.queues, p_key text, p_now timestamptz, p_taken jsonb)
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_room integer := 2147483647;
BEGIN
    IF p_taken ? p_key THEN
        RETURN (p_taken ->> p_key)::integer;
    END IF;
    IF p_q.key_concurrency IS NOT NULL THEN
        v_room := p_q.key_concurrency - (
            SELECT pg_catalog.count(*) FROM pgsched.jobs j
            WHERE j.state = 'running' AND j.queue = p_q.name AND j.concurrency_key = p_key
              AND j.lease_expires_at > p_now)::integer;
    END IF;
    IF p_q.key_rate IS NOT NULL THEN
        v_room := least(v_room, p_q.key_rate - coalesce((
            SELECT pg_catalog.count(*) FROM pgsched.rate_windows w, unnest(w.starts) s
            WHERE w.queue = p_q.name AND w.rate_key = p_key AND s > p_now - p_q.rate_period), 0)::integer);
    END IF;
    RETURN v_room;
END
$$;

-- functions/_claim_limited.sql
-- _claim_limited
-- contract: claim()'s path for a queue with limits (concurrency or rate
-- limits, per-key limits; docs/dispatch.md): leases
-- up to p_n of its due jobs as claim() does, never more than the limits
-- allow at this moment, and returns them in claim()'s shape.
--
-- Claimers of one such queue take turns (a transaction-scoped advisory lock
-- on the queue), so the counts read here stay true until the claim commits:
-- two workers claiming at once cannot exceed a limit. Concurrency counts
-- leases that have not expired (a SIGKILLed worker's slot frees when its
-- lease runs out, with nothing to repair); rates count the starts recorded
-- in pgsched.rate_windows within the last rate_period (a sliding window).
-- As claim() does, its due jobs are read from pgsched.ready in strict order
-- (under tenant fairness the order is the tenants' shares already:
-- _fair_stamp). Per-key limits skip jobs whose key is full, reading at most
-- 1000 candidates. Like claim(), it writes no audit event (the row
-- keeps claimed_at; see pgsched.job_timeline).
CREATE OR REPLACE FUNCTION pgsched._claim_limited(
    p_worker text,
    p_queue  text,
    p_n      integer,
    p_lease  interval,
    p_labels text[],
    p_scope  text,
    p_now    timestamptz
)
RETURNS TABLE (
    id bigint, shard smallint, queue text, task text, args jsonb, attempt integer,
    max_attempts integer, lease_token bigint, idempotency_key text, run_at timestamptz,
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz, trace_context jsonb
)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan per statement, pruned to the shard when it runs.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_q pgsched.queues;
    v_k integer := p_n;
    v_keyed boolean;
    v_scan integer;
    v_ids bigint[] := '{}';
    v_shards smallint[] := '{}';
    v_slots smallint[] := '{}';
    v_rows tid[] := '{}';
    v_room jsonb := '{}';
    v_left integer;
    v_cand record;
    v_shard smallint;
    v_sids bigint[];
BEGIN
    SELECT * INTO v_q FROM pgsched.queues q WHERE q.name = p_queue;
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pgsched: claims from queue % (a dispatch policy) must run in READ COMMITTED', p_queue
            USING ERRCODE = 'invalid_transaction_state',
                  HINT = 'The limits are counted under a lock; an older snapshot would not see the latest claims.';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgsched.dispatch'), pg_catalog.hashtext(p_queue));

    IF v_q.concurrency IS NOT NULL THEN
        v_k := least(v_k, v_q.concurrency - (
            SELECT pg_catalog.count(*) FROM pgsched.jobs j
            WHERE j.state = 'running' AND j.queue = p_queue AND j.lease_expires_at > p_now)::integer);
    END IF;
    IF v_q.rate IS NOT NULL THEN
        v_k := least(v_k, v_q.rate - coalesce((
            SELECT pg_catalog.count(*) FROM pgsched.rate_windows w, unnest(w.starts) s
            WHERE w.queue = p_queue AND w.rate_key = '' AND s > p_now - v_q.rate_period), 0)::integer);
    END IF;
    IF v_k <= 0 THEN
        RETURN;
    END IF;
    v_keyed := v_q.key_concurrency IS NOT NULL OR v_q.key_rate IS NOT NULL;
    v_scan := CASE WHEN v_keyed THEN least(v_k * 10 + 100, 1000) ELSE v_k END;

    -- Its due jobs in strict order, from pgsched.ready (as claim()).
    FOR v_cand IN
        SELECT r.id, r.shard, r.concurrency_key, r.slot, r.ctid AS row_at
        FROM pgsched.ready r
        WHERE r.queue = p_queue
          AND (r.labels = '{}' OR r.labels <@ coalesce(p_labels, '{}'))
          AND (p_scope IS NULL OR r.tenant = p_scope)
        ORDER BY r.dispatch_group, r.dispatch_rank, r.dispatch_at, r.id
        LIMIT v_scan
    LOOP
        EXIT WHEN pg_catalog.cardinality(v_ids) >= v_k;
        IF v_keyed AND v_cand.concurrency_key IS NOT NULL THEN
            v_left := pgsched._key_room(v_q, v_cand.concurrency_key, p_now, v_room);
            CONTINUE WHEN v_left <= 0;
            v_room := v_room || pg_catalog.jsonb_build_object(v_cand.concurrency_key, v_left - 1);
        END IF;
        v_ids := v_ids || v_cand.id;
        v_shards := v_shards || v_cand.shard;
        v_slots := v_slots || v_cand.slot;
        v_rows := v_rows || v_cand.row_at;
    END LOOP;
    IF pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;

    -- One statement per shard, pruned to its partition (as claim() does).
    FOR v_shard IN SELECT DISTINCT u.s FROM unnest(v_shards) AS u(s) ORDER BY 1 LOOP
        v_sids := ARRAY(SELECT u.i FROM unnest(v_ids, v_shards) AS u(i, s) WHERE u.s = v_shard);
        RETURN QUERY
        WITH locked AS MATERIALIZED (
            SELECT j.id
            FROM pgsched.jobs j
            WHERE j.shard = v_shard AND j.id = ANY (v_sids) AND j.state = 'available'
            ORDER BY j.id
            FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE pgsched.jobs j
            SET state = 'running',
                attempt = j.attempt + 1,
                lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                leased_by = p_worker,
                lease_expires_at = p_now + p_lease,
                claimed_at = p_now,
                started_at = NULL
            WHERE j.shard = v_shard AND j.id = ANY (ARRAY(SELECT l.id FROM locked l)) AND j.state = 'available'
            RETURNING j.*
        ), taken AS (
            -- Their due rows leave pgsched.ready, found by the addresses read above (and their ids: a row
            -- that moved is left, never another job's), whatever the statistics say.
            DELETE FROM pgsched.ready r
            WHERE r.ctid = ANY (v_rows)
              AND (r.slot, r.ctid, r.id) IN (SELECT u.slot, u.row_at, u.id
                                             FROM unnest(v_slots, v_rows, v_ids) AS u(slot, row_at, id)
                                             WHERE u.id IN (SELECT l.id FROM leased l))
        ), started AS (
            -- The window keeps the starts inside the period, oldest first.
            INSERT INTO pgsched.rate_windows AS w (queue, rate_key, starts)
            SELECT p_queue, k.rate_key, pg_catalog.array_fill(p_now, ARRAY[k.n])
            FROM (SELECT ''::text AS rate_key, pg_catalog.count(*)::integer AS n FROM leased
                  WHERE v_q.rate IS NOT NULL HAVING pg_catalog.count(*) > 0
                  UNION ALL
                  SELECT l.concurrency_key, pg_catalog.count(*)::integer FROM leased l
                  WHERE v_q.key_rate IS NOT NULL AND l.concurrency_key IS NOT NULL
                  GROUP BY l.concurrency_key) k
            ON CONFLICT ON CONSTRAINT rate_windows_pkey DO UPDATE
            SET starts = ARRAY(SELECT s FROM unnest(w.starts) s WHERE s > p_now - v_q.rate_period ORDER BY s)
                         || EXCLUDED.starts
        )
        SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at, l.trace_context
        FROM leased l;
    END LOOP;
END
$$;

-- functions/_put_back.sql
-- _put_back
-- contract: returns a running job to the queue under its fencing token
-- without spending its failure budget: max_attempts grows by one, so the
-- attempt counter keeps growing (every run has a new attempt and token) while
-- the job keeps as many failures as it had. A job whose cancellation was
-- requested is cancelled instead. Returns the new state, or 'lease_lost'
-- (a stale token, or a lease that ran out before p_now: expire_leases hands
-- that job back, and claim() already counts its slot free).
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
    v_worker text;
BEGIN
    SELECT c.max_handbacks INTO v_max_handbacks FROM pgsched.config c;
    -- The holder of this token (the claim recorded below): a token is leased once.
    SELECT j.leased_by INTO v_worker FROM pgsched.jobs j WHERE j.id = p_job_id AND j.lease_token = p_token;
    DELETE FROM pgsched.jobs j
    WHERE p_kind = 'released'
      AND j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running' AND j.lease_expires_at > p_now
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

    -- Handed back due now (p_run_at NULL): a job already due keeps its run_at, the
    -- time it was due (a schedule's fire time, what ctx.scheduled_at reports), as an
    -- expired lease does; only a snooze moves it.
    UPDATE pgsched.jobs j
    SET run_at = CASE WHEN p_run_at IS NULL THEN LEAST(j.run_at, p_now) ELSE p_run_at END,
        state = CASE WHEN v_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        -- saturates at the enqueue bound (jobs_max_attempts_range): never overflows
        max_attempts = j.max_attempts + (j.max_attempts < 1000000)::integer,
        handbacks = j.handbacks + (p_kind = 'released' AND j.started_at IS NOT NULL AND NOT j.service)::integer,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running' AND j.lease_expires_at > p_now
      AND j.cancel_requested_at IS NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        -- the attempt did not complete: its claim is recorded now (job_timeline)
        PERFORM pgsched._event(p_job_id, v_job.claimed_at, 'claimed', v_job.attempt, v_worker, p_token)
        WHERE v_job.claimed_at IS NOT NULL;
        PERFORM pgsched._event(p_job_id, p_now, p_kind, v_job.attempt, NULL, p_token,
            pg_catalog.jsonb_build_object('run_at', v_job.run_at));
        IF v_job.state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_job.state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running' AND j.lease_expires_at > p_now
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

-- functions/_home_shard.sql
-- _home_shard
-- contract: the shard of a job without an idempotency key. Every job one
-- session enqueues within one second gets the same one; the next second the
-- next one; two sessions start from different ones. Jobs enqueued together
-- are claimed together, so a claim, its start() and its complete() find
-- their jobs in one or two partitions instead of in all of them (each
-- partition a statement touches costs it its indexes, triggers and checks
-- once more); concurrent producers still spread over the shards. p_shards:
-- the installed number (pgsched.config.shards). A plain expression, so that
-- PL/pgSQL evaluates it without a query.
CREATE OR REPLACE FUNCTION pgsched._home_shard(p_shards integer)
RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT ((pg_catalog.pg_backend_pid()::bigint
             + pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.now()))::bigint)
            % p_shards)::smallint
$$;

-- functions/_release.sql
-- _release
-- contract: makes due those of the waiting jobs (p_jobs on p_shards) that
-- have no dependency left: 'available' (run_at moved up to p_now, so start
-- lag counts from the release), or 'scheduled' when run_at is still ahead;
-- wakes their queues. p_met[i], when given, is how many of job i's
-- pgsched.job_dependencies rows the caller has just deleted (met). Returns
-- how many it made due.
--
-- A waiting job counts its rows left (waits_for, set by _depend), so the
-- completion that meets the last of 10,000 dependencies updates one counter
-- and reads nothing of the others: no probe of job_dependencies, whose
-- statistics after a large fan-in say every row waits for one job (the
-- planner then reads them all). A job without a count (waits_for NULL)
-- has its rows looked up.
--
-- Statements in order on purpose. The first locks the jobs in id order; the
-- counters then go down under those locks: two dependencies completing at
-- once in two transactions each delete their own row and queue here, the
-- second one decrements what the first one left, so the last completion
-- always releases the job.
CREATE OR REPLACE FUNCTION pgsched._release(
    p_jobs   bigint[],
    p_shards smallint[],
    p_now    timestamptz,
    p_met    integer[] DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan per statement, kept: planning them anew over every shard's
-- partition cost more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queues text[];
    v_scheduled boolean;
    v_count integer;
BEGIN
    -- Rows by id = ANY (an id lives on one shard; the shards prune): index
    -- probes in any plan, where a join with unnest() may be planned as a
    -- scan of every partition.
    PERFORM 1
    FROM pgsched.jobs j
    WHERE j.id = ANY (p_jobs) AND j.shard = ANY (p_shards) AND j.state = 'waiting'
    ORDER BY j.id
    FOR UPDATE OF j;

    IF p_met IS NOT NULL THEN
        UPDATE pgsched.jobs j
        SET waits_for = j.waits_for - u.met
        FROM unnest(p_jobs, p_met) AS u(id, met)
        WHERE j.id = ANY (p_jobs) AND j.shard = ANY (p_shards) AND j.id = u.id
          AND j.state = 'waiting' AND j.waits_for IS NOT NULL AND u.met > 0;
    END IF;

    WITH released AS (
        UPDATE pgsched.jobs j
        SET state = CASE WHEN j.run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            run_at = greatest(j.run_at, p_now),
            waits_for = NULL
        WHERE j.id = ANY (p_jobs) AND j.shard = ANY (p_shards) AND j.state = 'waiting'
          AND CASE WHEN j.waits_for IS NULL
                   THEN NOT EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.job = j.id)
                   ELSE j.waits_for <= 0 END
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

-- functions/_release_callbacks.sql
-- _release_callbacks
-- contract: a job (p_id) just ended dead or cancelled: the dependency rows
-- of its dependents with policy 'run' (batch callbacks) go, as a
-- completion's would, and every such dependent left with none is made due
-- (_release). _finish calls it. One index probe on depends_on finds the
-- rows, so ending the last member of a large batch costs what the first did.
CREATE OR REPLACE FUNCTION pgsched._release_callbacks(
    p_id  bigint,
    p_now timestamptz
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_jobs bigint[];
    v_shards smallint[];
    v_met integer[];
BEGIN
    WITH freed AS (
        DELETE FROM pgsched.job_dependencies d
        WHERE d.depends_on = p_id AND d.on_failure = 'run'
        RETURNING d.job, d.job_shard
    )
    SELECT pg_catalog.array_agg(f.job ORDER BY f.job), pg_catalog.array_agg(f.job_shard ORDER BY f.job),
           pg_catalog.array_agg(1 ORDER BY f.job)
    INTO v_jobs, v_shards, v_met
    FROM freed f;
    IF v_jobs IS NULL THEN
        RETURN 0;
    END IF;
    RETURN pgsched._release(v_jobs, v_shards, p_now, v_met);
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
    v_met integer[];
BEGIN
    -- Only what this transaction completed: a stale completion of a job that
    -- since died must not release dependents that wait for its redrive.
    -- The rows go by the primary key's leading column, one probe per id: a
    -- join could be planned as a scan of every dependency row (after a large
    -- fan-in the statistics make that look cheap), and a batch callback's
    -- 10,000th member would read the other 9,999 rows.
    WITH freed AS (
        DELETE FROM pgsched.job_dependencies d
        WHERE d.depends_on = ANY (ARRAY(
            SELECT h.id
            FROM pgsched.job_history h
            WHERE h.id = ANY (p_ids) AND h.finished_at = p_now AND h.state = 'completed'
              AND h.finished_xid = pg_catalog.pg_current_xact_id()))
        RETURNING d.job, d.job_shard
    )
    SELECT pg_catalog.array_agg(f.job ORDER BY f.job), pg_catalog.array_agg(f.job_shard ORDER BY f.job),
           pg_catalog.array_agg(f.n ORDER BY f.job)
    INTO v_jobs, v_shards, v_met
    FROM (SELECT fr.job, fr.job_shard, pg_catalog.count(*)::integer AS n FROM freed fr GROUP BY fr.job, fr.job_shard) f;
    IF v_jobs IS NULL THEN
        RETURN 0;
    END IF;
    RETURN pgsched._release(v_jobs, v_shards, p_now, v_met);
END
$$;

-- functions/_replace.sql
-- _replace
-- contract: enqueue(on_conflict => 'replace') for a key already held: the
-- job holding key p_key (tenant p_tenant), while it has not started
-- (scheduled, available or waiting), takes p_args, p_run_at and p_priority
-- (a debounce: each event moves the run) and keeps its id, shard, attempts,
-- lease token history and key; a waiting job keeps waiting for its
-- dependencies. Returns its id. One UPDATE checks the state and writes, so a
-- claim that took the row first wins: the UPDATE waits for the claim's row
-- lock, then sees the job running and changes nothing. Refused with SQLSTATE
-- PS423, naming the job and its state, once it started (running) or ended
-- (its key held for the retention); with PS422 when it is another task.
-- The caller (enqueue) holds the key row's lock, so two replaces of one key
-- take turns. The claim order is stamped again by tg_jobs__redispatch.
CREATE OR REPLACE FUNCTION pgsched._replace(
    p_key      text,
    p_tenant   text,
    p_task     text,
    p_args     jsonb,
    p_run_at   timestamptz,
    p_priority integer,
    p_now      timestamptz
)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_shard smallint;
    v_state pgsched.job_state;
    v_queue text;
    v_task text;
BEGIN
    SELECT k.job_id, k.shard INTO v_id, v_shard FROM pgsched.idempotency_keys k
    WHERE k.key = p_key AND k.tenant IS NOT DISTINCT FROM p_tenant;
    UPDATE pgsched.jobs j
    SET args = coalesce(p_args, '{}'), run_at = p_run_at, priority = coalesce(p_priority, 0),
        state = CASE WHEN j.state = 'waiting' THEN 'waiting'
                     WHEN p_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state
    WHERE j.id = v_id AND j.shard = v_shard AND j.task = p_task
      AND j.state IN ('scheduled', 'available', 'waiting')
    RETURNING j.state, j.queue INTO v_state, v_queue;
    IF FOUND THEN
        IF v_state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_queue);
        ELSIF v_state = 'scheduled' THEN
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_id;
    END IF;

    -- Why not: the job's task and where it is now (active, else its latest outcome).
    SELECT j.task, j.state INTO v_task, v_state FROM pgsched.jobs j WHERE j.id = v_id AND j.shard = v_shard;
    IF NOT FOUND THEN
        SELECT h.task, h.state INTO v_task, v_state FROM pgsched.job_history h
        WHERE h.id = v_id ORDER BY h.finished_at DESC LIMIT 1;
    END IF;
    IF v_task IS DISTINCT FROM p_task THEN
        RAISE EXCEPTION 'pgsched: idempotency_key % is held by job % with task %, not %', pgsched._shown(p_key), v_id,
                pgsched._shown(v_task), pgsched._shown(p_task)
            USING ERRCODE = 'PS422', COLUMN = 'idempotency_key', SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'on_conflict => ''replace'' changes args, run_at and priority, never the task.';
    END IF;
    RAISE EXCEPTION 'pgsched: idempotency_key % is held by job %, which is %: a job is replaced only before it starts',
            pgsched._shown(p_key), v_id, v_state
        USING ERRCODE = 'PS423', COLUMN = 'idempotency_key', SCHEMA = 'pgsched', TABLE = 'jobs',
              HINT = CASE WHEN v_state = 'running'
                          THEN 'Enqueue with another key for another run, or keep the running one (on_conflict => ''keep'').'
                          ELSE 'The key is held for the retention after the job ended; key_scope => ''active'' frees it when the job ends.' END;
END
$$;

-- functions/_tenant_visible.sql
-- _tenant_visible
-- contract: whether a row of tenant p_tenant is visible to (and writable by)
-- the current session, as the row-level security policies decide it (see
-- _tenant_scope): true for every row when the session is not confined,
-- else only for rows of its tenant (no tenant is not "any tenant"). For the
-- SECURITY DEFINER functions, which bypass row-level security and check
-- single rows with it. Every call and operator is schema-qualified.
CREATE OR REPLACE FUNCTION pgsched._tenant_visible(p_tenant text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT CASE WHEN s.scope IS NULL THEN true
                ELSE coalesce(p_tenant OPERATOR(pg_catalog.=) s.scope, false) END
    FROM pgsched._tenant_scope() AS s(scope)
$$;

-- functions/_withdraw.sql
-- _withdraw
-- contract: removes the occurrences of p_schedule that have not started
-- (waiting to be due or queued for a worker, never attempted) and are due at
-- or after p_from: their jobs leave pgsched.jobs (never run, not
-- filed as history), their idempotency keys are released so a re-expansion
-- can create the same instants again, and their occurrence rows say
-- 'withdrawn' with p_reason. Occurrences from p_from on that the DST
-- policies decided not to fire (no job) are withdrawn too, so the next
-- expansion decides them afresh. Returns how many jobs were withdrawn.
CREATE OR REPLACE FUNCTION pgsched._withdraw(
    p_schedule text,
    p_from     timestamptz,
    p_now      timestamptz,
    p_reason   text
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    WITH gone AS (
        DELETE FROM pgsched.jobs j
        WHERE j.schedule = p_schedule AND j.state IN ('scheduled', 'available') AND j.attempt = 0
          AND j.run_at >= p_from
        RETURNING j.id, j.idempotency_key, j.run_at
    ), keys AS (
        DELETE FROM pgsched.idempotency_keys k
        USING gone g
        WHERE k.key = g.idempotency_key AND k.job_id = g.id
    ), marked AS (
        UPDATE pgsched.schedule_occurrences o
        SET decision = 'withdrawn', reason = p_reason, decided_at = p_now
        FROM gone g
        WHERE o.schedule = p_schedule AND o.job_id = g.id
    ), reopened AS (
        UPDATE pgsched.schedule_occurrences o
        SET decision = 'withdrawn', reason = p_reason, decided_at = p_now
        WHERE o.schedule = p_schedule AND o.fire_at >= p_from AND o.job_id IS NULL
          AND o.decision IN ('skipped_gap', 'skipped_dst_overlap')
    )
    SELECT pg_catalog.count(*) INTO v_count FROM gone;
    RETURN v_count;
END
$$;

-- functions/acquire_idle_shards.sql
-- acquire_idle_shards
-- contract: the shard leases of a worker that expands schedules while no
-- scanner does (`pgsched worker` alone fires schedules). While no scanner is
-- live (none seen within `lease`), renews the leases `holder` has and takes
-- every shard nobody holds (free or expired), raising its epoch, exactly as
-- acquire_shards does; writes go through the same fence (_hold_shard). As soon
-- as a scanner is live it gives all of them back, so scanners take over at
-- their next renewal. Unlike a scanner, the holder is not recorded in
-- pgsched.scanners: it never counts in the scanners' fair shares. Returns the
-- shards held afterwards with their epochs and expiry.
CREATE OR REPLACE FUNCTION pgsched.acquire_idle_shards(
    holder text,
    lease  interval    DEFAULT '10 seconds',
    p_now  timestamptz DEFAULT NULL
)
RETURNS TABLE (shard smallint, epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
BEGIN
    IF acquire_idle_shards.lease IS NULL OR acquire_idle_shards.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: the lease must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF acquire_idle_shards.holder IS NULL
       OR EXISTS (SELECT 1 FROM pgsched.scanners s WHERE s.name = acquire_idle_shards.holder) THEN
        RAISE EXCEPTION 'pgsched: % is a scanner name; idle shards are held under another name',
            coalesce(acquire_idle_shards.holder, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF EXISTS (SELECT 1 FROM pgsched.scanners s WHERE s.last_seen > v_now - acquire_idle_shards.lease) THEN
        UPDATE pgsched.shard_leases l
        SET owner = NULL, expires_at = NULL, renewed_at = v_now
        WHERE l.owner = acquire_idle_shards.holder;
        RETURN;
    END IF;

    UPDATE pgsched.shard_leases l
    SET expires_at = v_now + acquire_idle_shards.lease, renewed_at = v_now,
        epoch = CASE WHEN l.expires_at > v_now THEN l.epoch ELSE l.epoch + 1 END
    WHERE l.owner = acquire_idle_shards.holder;

    UPDATE pgsched.shard_leases l
    SET owner = acquire_idle_shards.holder, epoch = l.epoch + 1,
        expires_at = v_now + acquire_idle_shards.lease, renewed_at = v_now
    WHERE l.shard IN (
        SELECT l2.shard FROM pgsched.shard_leases l2
        WHERE l2.owner IS NULL OR l2.expires_at <= v_now
        ORDER BY l2.shard
        FOR UPDATE SKIP LOCKED);

    RETURN QUERY
    SELECT l.shard, l.epoch, l.expires_at
    FROM pgsched.shard_leases l
    WHERE l.owner = acquire_idle_shards.holder
    ORDER BY l.shard;
END
$$;

-- functions/acquire_shards.sql
-- acquire_shards
-- contract: a scanner's tick for its shard leases. Records the scanner as
-- live, renews the leases it holds, gives back shards beyond its fair share
-- (shards / live scanners, rounded up) so newcomers get theirs, and takes
-- free or expired shards up to that share. Taking a shard raises its epoch;
-- renewing keeps it; a lease that lapsed before renewal is re-taken with a
-- new epoch, so writes prepared under the old one are rejected. Returns the
-- shards held afterwards with their epochs and expiry.
CREATE OR REPLACE FUNCTION pgsched.acquire_shards(
    scanner text,
    lease   interval    DEFAULT '10 seconds',
    host    text        DEFAULT NULL,
    pid     integer     DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (shard smallint, epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_shards integer;
    v_live integer;
    v_share integer;
    v_mine integer;
BEGIN
    PERFORM pgsched._check_unconfined('run a scanner (scanners act for every tenant)');
    IF acquire_shards.lease IS NULL OR acquire_shards.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: the scanner lease must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.scanners AS s (name, host, pid, started_at, last_seen)
    VALUES (acquire_shards.scanner, acquire_shards.host, acquire_shards.pid, v_now, v_now)
    ON CONFLICT (name) DO UPDATE SET last_seen = v_now;

    SELECT c.shards INTO v_shards FROM pgsched.config c;
    SELECT pg_catalog.count(*) INTO v_live
    FROM pgsched.scanners s WHERE s.last_seen > v_now - acquire_shards.lease;
    v_share := (v_shards + greatest(v_live, 1) - 1) / greatest(v_live, 1);

    -- Renew what is still ours; a lapsed lease of ours comes back with a new epoch.
    UPDATE pgsched.shard_leases l
    SET expires_at = v_now + acquire_shards.lease, renewed_at = v_now,
        epoch = CASE WHEN l.expires_at > v_now THEN l.epoch ELSE l.epoch + 1 END
    WHERE l.owner = acquire_shards.scanner;

    SELECT pg_catalog.count(*) INTO v_mine FROM pgsched.shard_leases l WHERE l.owner = acquire_shards.scanner;
    IF v_mine > v_share THEN
        UPDATE pgsched.shard_leases l
        SET owner = NULL, expires_at = NULL, renewed_at = v_now
        WHERE l.shard IN (
            SELECT l2.shard FROM pgsched.shard_leases l2
            WHERE l2.owner = acquire_shards.scanner
            ORDER BY l2.shard DESC
            LIMIT v_mine - v_share);
    ELSIF v_mine < v_share THEN
        UPDATE pgsched.shard_leases l
        SET owner = acquire_shards.scanner, epoch = l.epoch + 1,
            expires_at = v_now + acquire_shards.lease, renewed_at = v_now
        WHERE l.shard IN (
            SELECT l2.shard FROM pgsched.shard_leases l2
            WHERE l2.owner IS NULL OR l2.expires_at <= v_now
            ORDER BY l2.shard
            LIMIT v_share - v_mine
            FOR UPDATE SKIP LOCKED);
    END IF;

    RETURN QUERY
    SELECT l.shard, l.epoch, l.expires_at
    FROM pgsched.shard_leases l
    WHERE l.owner = acquire_shards.scanner
    ORDER BY l.shard;
END
$$;

-- functions/add_occurrences.sql
-- add_occurrences
-- contract: files a scanner's expansion of one schedule over a window, fenced
-- by the scanner's lease on the schedule's shard (PS409 when lost). Each
-- element of `occurrences` is {fire_at, nominal, dst, decision, reason}:
-- decisions 'fire' and 'misfire_fired' become ordinary jobs due at fire_at
-- whose idempotency key is (schedule, fire time in UTC), so two scanners, a
-- restart or a re-expansion never create one occurrence twice; every element
-- is recorded in schedule_occurrences with its decision (first decision
-- wins). When the schedule's version is not p_version any more (edited
-- meanwhile) nothing is filed. A version change since the last expansion
-- first withdraws the not-yet-started occurrences from p_from on. Returns the
-- number of jobs created.
CREATE OR REPLACE FUNCTION pgsched.add_occurrences(
    scanner     text,
    shard       integer,
    epoch       bigint,
    schedule    text,
    version     integer,
    occurrences jsonb,
    p_from      timestamptz,
    p_until     timestamptz,
    p_now       timestamptz DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_sched pgsched.schedules;
    v_occ jsonb;
    v_fire timestamptz;
    v_job_id bigint;
    v_created integer := 0;
    v_key text;
BEGIN
    PERFORM pgsched._hold_shard(add_occurrences.scanner, add_occurrences.shard, add_occurrences.epoch, v_now);
    SELECT * INTO v_sched FROM pgsched.schedules s
    WHERE s.name = add_occurrences.schedule AND s.version = add_occurrences.version
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF v_sched.expanded_version <> v_sched.version THEN
        PERFORM pgsched._withdraw(v_sched.name, add_occurrences.p_from, v_now,
                                  pg_catalog.format('schedule changed (version %s)', v_sched.version));
    END IF;

    FOR v_occ IN SELECT e FROM pg_catalog.jsonb_array_elements(coalesce(add_occurrences.occurrences, '[]')) e LOOP
        v_fire := (v_occ->>'fire_at')::timestamptz;
        v_job_id := NULL;
        IF v_occ->>'decision' IN ('fire', 'misfire_fired') AND v_sched.enabled THEN
            v_key := 'pgsched:schedule:' || v_sched.name || ':'
                     || pg_catalog.to_char(v_fire AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"');
            INSERT INTO pgsched.jobs AS j
                (shard, queue, task, args, priority, run_at, idempotency_key, max_attempts, labels, tenant, schedule)
            VALUES (v_sched.shard, v_sched.queue, v_sched.task, v_sched.args, v_sched.priority, v_fire, v_key,
                    v_sched.max_attempts, v_sched.labels, v_sched.tenant, v_sched.name)
            RETURNING j.id INTO v_job_id;
            IF v_job_id IS NOT NULL THEN
                v_created := v_created + 1;
            ELSE
                SELECT k.job_id INTO v_job_id FROM pgsched.idempotency_keys k
                WHERE k.key = v_key AND k.tenant IS NOT DISTINCT FROM v_sched.tenant;
            END IF;
        END IF;
        INSERT INTO pgsched.schedule_occurrences AS o
            (schedule, fire_at, nominal, dst, decision, reason, job_id, version, decided_at)
        VALUES (v_sched.name, v_fire, v_occ->>'nominal', v_occ->>'dst', v_occ->>'decision', v_occ->>'reason',
                v_job_id, v_sched.version, v_now)
        ON CONFLICT ON CONSTRAINT schedule_occurrences_pkey DO UPDATE
        SET decision = EXCLUDED.decision, reason = EXCLUDED.reason, job_id = EXCLUDED.job_id,
            version = EXCLUDED.version, decided_at = EXCLUDED.decided_at, nominal = EXCLUDED.nominal,
            dst = EXCLUDED.dst
        WHERE o.decision = 'withdrawn';
    END LOOP;

    UPDATE pgsched.schedules s
    SET expanded_until = greatest(coalesce(s.expanded_until, add_occurrences.p_until), add_occurrences.p_until),
        expanded_version = s.version, last_error = NULL
    WHERE s.name = v_sched.name;
    RETURN v_created;
END
$$;

-- functions/bind_tenant.sql
-- bind_tenant
-- contract: confines the login role `role` to `tenant` on every path (reads
-- through row-level security, enqueues, claims, completions, cancels,
-- retries, schedules, idempotency keys) from its next statement on; SET ROLE
-- and SET pgsched.tenant do not move it. Rebinding replaces the tenant.
-- Only members of pgsched_tenant_scoped are confined, so the role is granted
-- it when it is not a member yet (the owner needs ADMIN OPTION on it).
-- Superusers and members of the schema's owner are never confined, so
-- binding one is refused. Only a session that is not confined itself may
-- bind. Returns the previous tenant, or NULL.
CREATE OR REPLACE FUNCTION pgsched.bind_tenant(role regrole, tenant text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_previous text;
BEGIN
    PERFORM pgsched._check_unconfined('bind tenants');
    IF bind_tenant.role IS NULL OR bind_tenant.tenant IS NULL THEN
        RAISE EXCEPTION 'pgsched: bind_tenant needs a role and a tenant' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.pg_has_role(bind_tenant.role, current_user, 'MEMBER') THEN
        RAISE EXCEPTION 'pgsched: % is a superuser or a member of the schema''s owner, which are never confined',
            bind_tenant.role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_catalog.pg_has_role(bind_tenant.role, 'pgsched_tenant_scoped', 'MEMBER') THEN
        EXECUTE pg_catalog.format('GRANT pgsched_tenant_scoped TO %I',
                                  (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid = bind_tenant.role));
    END IF;
    SELECT b.tenant INTO v_previous FROM pgsched.tenant_roles b WHERE b.role = bind_tenant.role;
    INSERT INTO pgsched.tenant_roles AS b (role, tenant, bound_at)
    VALUES (bind_tenant.role, bind_tenant.tenant, pg_catalog.now())
    ON CONFLICT ON CONSTRAINT tenant_roles_pkey DO UPDATE SET tenant = EXCLUDED.tenant, bound_at = EXCLUDED.bound_at;
    RETURN v_previous;
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

-- functions/cancel_many.sql
-- cancel_many
-- contract: pgsched.cancel for each of p_ids, in one statement and one
-- transaction, in id order (so two bulk calls never deadlock), each id once;
-- returns (job_id, result) with cancel()'s answer per job. It runs with the
-- caller's rights and goes through cancel() itself, so every rule of a single
-- cancel (tenant confinement, fencing on state) holds for each job. At most
-- 10000 ids per call.
CREATE OR REPLACE FUNCTION pgsched.cancel_many(
    p_ids bigint[],
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, result text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    -- Refused at once for a moved clock, even when there is no job to pass it to.
    PERFORM pgsched._clock(p_now);
    IF pg_catalog.cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'pgsched: cancel_many takes at most 10000 jobs per call, not %',
            pg_catalog.cardinality(p_ids)
            USING ERRCODE = 'program_limit_exceeded', HINT = 'Call it once per slice of the ids.';
    END IF;
    FOR job_id IN SELECT DISTINCT u.id FROM pg_catalog.unnest(p_ids) AS u(id) WHERE u.id IS NOT NULL ORDER BY u.id
    LOOP
        result := pgsched.cancel(job_id, p_now);
        RETURN NEXT;
    END LOOP;
END
$$;

-- functions/cancels_requested.sql
-- cancels_requested
-- contract: of these (job_id, token) pairs, the jobs whose lease is current
-- and whose cancellation was requested. Reads only: workers without LISTEN
-- (behind a transaction-pooling PgBouncer, or --no-listen) call it every
-- fraction of a second, between heartbeats, so a running handler learns of a
-- cancel promptly without extending every lease that often.
CREATE OR REPLACE FUNCTION pgsched.cancels_requested(
    job_ids bigint[],
    tokens  bigint[]
)
RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- The ids as an index condition, never a scan of the running rows or of a
-- partition (see heartbeat()). A current token is a running job's
-- (jobs_state_valid), so no filter on state: with one, the plan may read the
-- running rows' partial index whole.
SET enable_seqscan = off
AS $$
    SELECT j.id
    FROM pgsched.jobs j
    JOIN unnest(cancels_requested.job_ids, cancels_requested.tokens) AS u(id, token)
      ON j.id = u.id AND j.lease_token = u.token
    WHERE j.id = ANY (cancels_requested.job_ids) AND j.cancel_requested_at IS NOT NULL
$$;

-- functions/claim.sql
-- claim
-- contract: leases up to n due jobs of `queues` (skipping paused queues, and
-- jobs whose labels the worker does not all offer) to `worker` for `lease`.
-- Each claimed job gets a new fencing token, larger than any before, and its
-- attempt incremented. A job is never leased twice at once: its row in
-- pgsched.jobs is locked with SKIP LOCKED and re-checked as 'available' by
-- the statement that leases it.
-- Its unlogged ring of due jobs, emptied by a crash or a promotion, is
-- filled again from pgsched.jobs before the first claim reads it
-- (_rebuild_ready).
-- The claim writes no audit event: the job's row keeps claimed_at, and an
-- attempt that ends other than completed records its claim then (see
-- pgsched.job_timeline).
--
-- Priority is strict (docs/dispatch.md): a queue's due jobs are read from
-- pgsched.ready, the due jobs' own ring of slots, in dispatch order
-- (priority DESC, run_at, id; or aged priority, see tg_jobs__dispatch) by one
-- index scan per slot, merged, that stops after n jobs whatever the backlog
-- and whatever the dead entries of jobs claimed before (a slot is emptied
-- whole once its jobs are claimed: rotate_ready). Queues take turns:
-- start_shard, which busy workers rotate, picks the queue read first.
--
-- A queue with limits (concurrency or rate) is claimed by _claim_limited,
-- one claimer at a time. Tenant fairness needs no path of its own: its
-- shares are in the stamps the index is ordered by (_fair_stamp).
--
-- starts: how many of the claimed jobs take a handler slot at once (a
-- worker counts those a slot frees up for within moments too, and records
-- the start again if one waits longer after all; start_tasks: only jobs of
-- these tasks; NULL: any). The first `starts` in
-- claim order are recorded as started by the claim itself (started_at,
-- deadline_at: what pgsched.start() records), so a job that runs at once
-- costs no start() statement and no second row version; they come back with
-- started_at and timeout set. The others (and a job whose cancel was
-- requested) have started_at NULL: start() records them when a slot takes
-- them. Queues with limits start nothing here.
-- The signature before starts and start_tasks (and its result without
-- started_at and timeout) is replaced, not overloaded, so a call with seven
-- arguments stays unambiguous.
DROP FUNCTION IF EXISTS pgsched.claim(text, text[], integer, interval, text[], integer, timestamptz);
CREATE OR REPLACE FUNCTION pgsched.claim(
    worker      text,
    queues      text[],
    n           integer,
    lease       interval,
    labels      text[]      DEFAULT '{}',
    start_shard integer     DEFAULT NULL,
    p_now       timestamptz DEFAULT NULL,
    starts      integer     DEFAULT 0,
    start_tasks text[]      DEFAULT NULL
)
RETURNS TABLE (
    id bigint, shard smallint, queue text, task text, args jsonb, attempt integer,
    max_attempts integer, lease_token bigint, idempotency_key text, run_at timestamptz,
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz, trace_context jsonb,
    started_at timestamptz, timeout interval
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan for every call instead of planning the partitioned statement
-- again at each one; and that plan the one that reads a batch's worth,
-- whatever the statistics said when it was made (made on empty tables, the
-- planner would rather sort every due row, or scan the jobs). The sort of
-- the batch it returns is then "disabled" and so costed huge: no JIT, which
-- would compile it at every call for a second or more.
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    -- The clock now, not at transaction start: the lease runs from the claim.
    v_clock timestamptz := pgsched._clock(p_now);
    v_now timestamptz := coalesce(v_clock, pg_catalog.clock_timestamp());
    v_queues text[];
    v_left integer := claim.n;
    v_starts integer := greatest(coalesce(claim.starts, 0), 0);
    v_got integer;
    v_queue text;
    v_nq integer;
    v_limited text[];
    -- A session confined to a tenant claims only that tenant's jobs.
    v_scope text := pgsched._caller_scope();
    -- the batch's due rows (in claim order), and the range of their shards and slots
    v_ids bigint[];
    v_shards smallint[];
    v_slots smallint[];
    v_rows tid[];
    v_lo smallint;
    v_hi smallint;
    v_slot_lo smallint;
    v_slot_hi smallint;
BEGIN
    -- A lease under a second would run out before its first heartbeat could
    -- renew it: the job would be lost to its worker as it is handed over.
    IF claim.n IS NULL OR claim.n < 1 OR claim.lease IS NULL OR claim.lease < interval '1 second' THEN
        RAISE EXCEPTION 'pgsched: claim needs n >= 1 and a lease of at least 1 second (got n %, lease %)',
                        claim.n, claim.lease
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The ring of due jobs is unlogged: after a crash or a promotion it is
    -- filled again from pgsched.jobs before anything is claimed from it.
    IF NOT EXISTS (SELECT FROM pgsched.ready_intact) THEN
        PERFORM pgsched._rebuild_ready();
    END IF;
    SELECT pg_catalog.array_agg(q) INTO v_queues
    FROM unnest(claim.queues) q
    WHERE NOT EXISTS (SELECT 1 FROM pgsched.queues pq WHERE pq.name = q AND pq.paused);
    IF v_queues IS NULL THEN
        RETURN;
    END IF;
    -- Queues with limits take their own path,
    -- in name order: their locks are always taken in one order (no deadlock).
    SELECT pg_catalog.array_agg(pq.name ORDER BY pq.name) INTO v_limited FROM pgsched.queues pq
    WHERE pq.name = ANY (v_queues)
      AND (pq.concurrency IS NOT NULL OR pq.key_concurrency IS NOT NULL OR pq.rate IS NOT NULL
           OR pq.key_rate IS NOT NULL);
    IF v_limited IS NOT NULL THEN
        FOREACH v_queue IN ARRAY v_limited LOOP
            RETURN QUERY SELECT l.*, NULL::timestamptz, NULL::interval
                         FROM pgsched._claim_limited(claim.worker, v_queue, v_left, claim.lease,
                                                     claim.labels, v_scope, v_now) l;
            GET DIAGNOSTICS v_got = ROW_COUNT;
            v_left := v_left - v_got;
            IF v_left <= 0 THEN
                RETURN;
            END IF;
        END LOOP;
        SELECT pg_catalog.array_agg(q) INTO v_queues FROM unnest(v_queues) q WHERE q <> ALL (v_limited);
        IF v_queues IS NULL THEN
            RETURN;
        END IF;
    END IF;

    v_nq := pg_catalog.cardinality(v_queues);

    FOR k IN 0 .. v_nq - 1 LOOP
        -- Queues take turns: a busy worker's claims start at a rotating one.
        v_queue := v_queues[((coalesce(claim.start_shard, 0) + k) % v_nq + v_nq) % v_nq + 1];
        -- The queue's due rows in strict order (one merge of the ready
        -- ring's slots), locked with SKIP LOCKED so that concurrent claimers
        -- pass each other's. A statement of their own: the next one then
        -- knows their shards and slots as values, and PostgreSQL prunes the
        -- other partitions of pgsched.jobs and pgsched.ready before it
        -- starts (a value computed inside the statement prunes only as it
        -- runs, after every partition's scans and indexes were set up: that
        -- setup was most of an empty claim's 300 us).
        SELECT pg_catalog.array_agg(d.id), pg_catalog.array_agg(d.shard), pg_catalog.array_agg(d.slot),
               pg_catalog.array_agg(d.row_at), pg_catalog.min(d.shard), pg_catalog.max(d.shard),
               pg_catalog.min(d.slot), pg_catalog.max(d.slot)
        INTO v_ids, v_shards, v_slots, v_rows, v_lo, v_hi, v_slot_lo, v_slot_hi
        FROM (
            SELECT r.slot, r.ctid AS row_at, r.id, r.shard
            FROM pgsched.ready r
            WHERE r.queue = v_queue
              -- the first arm keeps the row estimate right (most jobs need no labels)
              AND (r.labels = '{}' OR r.labels <@ coalesce(claim.labels, '{}'))
              AND (v_scope IS NULL OR r.tenant = v_scope)
            ORDER BY r.dispatch_group, r.dispatch_rank, r.dispatch_at, r.id
            LIMIT v_left
            FOR UPDATE SKIP LOCKED
        ) d;
        CONTINUE WHEN v_ids IS NULL;
        -- Then their jobs, locked with SKIP LOCKED too: a job someone else is
        -- changing (a cancel, a replace) is left to them with its row. A row
        -- whose job is no longer due (left behind by a change that raced a
        -- claim) goes.
        RETURN QUERY
        WITH due AS MATERIALIZED (
            -- in claim order (ord)
            SELECT u.id, u.shard, u.slot, u.row_at, u.ord
            FROM unnest(v_ids, v_shards, v_slots, v_rows) WITH ORDINALITY AS u(id, shard, slot, row_at, ord)
        ), locked AS MATERIALIZED (
            -- ids as an array: one index probe each, whatever the statistics say, never a scan of the
            -- partition (a join would leave that choice to the planner); only in the partitions of the
            -- batch's shards
            SELECT j.id, j.task, j.cancel_requested_at
            FROM pgsched.jobs j
            WHERE j.id = ANY (v_ids) AND j.shard = ANY (v_shards) AND j.shard BETWEEN v_lo AND v_hi
              AND j.state = 'available' AND j.queue = v_queue
            FOR UPDATE SKIP LOCKED
        ), gone AS MATERIALIZED (
            -- the rows of the jobs leased, and those whose job is no longer due
            SELECT d.slot, d.row_at, d.id
            FROM due d
            WHERE d.id IN (SELECT l.id FROM locked l)
               OR NOT EXISTS (SELECT FROM pgsched.jobs j
                              WHERE j.id = d.id AND j.shard = d.shard AND j.shard BETWEEN v_lo AND v_hi
                                AND j.state = 'available' AND j.queue = v_queue)
        ), taken AS (
            -- by their row addresses (locked above, so they stay put): one TID lookup each, whatever the
            -- statistics say (no index of pgsched.ready leads with them), never a scan of the queue's rows;
            -- not also "ctid = ANY (all of them)", which PostgreSQL then checks for every row (1,000 jobs:
            -- 2.6 ms of a 22 ms claim)
            DELETE FROM pgsched.ready r
            WHERE r.slot BETWEEN v_slot_lo AND v_slot_hi
              AND (r.slot, r.ctid, r.id) IN (SELECT g.slot, g.row_at, g.id FROM gone g)
        ), starting AS MATERIALIZED (
            -- the first v_starts in claim order start now; the others when a slot takes them (start())
            SELECT l.id
            FROM locked l
            JOIN due d ON d.id = l.id
            WHERE l.cancel_requested_at IS NULL AND (claim.start_tasks IS NULL OR l.task = ANY (claim.start_tasks))
            ORDER BY d.ord
            LIMIT v_starts
        ), clock AS MATERIALIZED (
            -- as start() records it: the clock when this statement writes, read once, so never before a
            -- dependency's finished_at (its completion committed before the statement began), and one reading
            -- for every start and deadline (deadline - start is the job's limit to the microsecond)
            SELECT coalesce(v_clock, pg_catalog.clock_timestamp()) AS at
        ), leased AS (
            UPDATE pgsched.jobs j
            SET state = 'running',
                attempt = j.attempt + 1,
                lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                leased_by = claim.worker,
                lease_expires_at = v_now + claim.lease,
                claimed_at = v_now,
                started_at = CASE WHEN j.id IN (SELECT s.id FROM starting s) THEN (SELECT c.at FROM clock c) END,
                deadline_at = CASE WHEN j.id IN (SELECT s.id FROM starting s)
                    THEN (SELECT c.at FROM clock c) + coalesce(j.timeout, (SELECT t.timeout FROM pgsched.tasks t
                                                      WHERE t.name = j.task AND (t.tenant IS NULL OR t.tenant = j.tenant)
                                                      ORDER BY t.tenant NULLS LAST LIMIT 1))
                    ELSE j.deadline_at END,
                unserved_since = CASE WHEN j.id IN (SELECT s.id FROM starting s) THEN NULL
                                      ELSE j.unserved_since END
            WHERE j.id = ANY (ARRAY(SELECT l.id FROM locked l))
              AND j.shard = ANY (v_shards) AND j.shard BETWEEN v_lo AND v_hi
              AND j.state = 'available'
            RETURNING j.*
        )
        SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at, l.trace_context,
               l.started_at, l.deadline_at - l.started_at
        FROM leased l
        ORDER BY l.dispatch_group, l.dispatch_rank, l.dispatch_at, l.id;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        -- (counted as if each started: a later queue's jobs then wait for start(), never start twice)
        v_starts := greatest(v_starts - v_got, 0);
        IF v_left <= 0 THEN
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- functions/complete.sql
-- complete
-- contract: finishes the jobs whose fencing token is still current, in one
-- statement per shard of the batch: each accepted job leaves pgsched.jobs and enters
-- pgsched.job_history as 'completed' with its result (its claim and
-- completion are read from that row: pgsched.job_timeline; no audit event).
-- A stale token (the lease expired and the job was handed to someone else, or
-- it already finished) changes nothing, and so does a lease that has run out
-- although no one has expired it yet (claim() already counts its slot free). Returns one row per input job saying
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
-- Each job is found by primary-key probes, whatever the statistics say: a
-- plan made while the partitions held a page or two (a sequential scan, or
-- a hash join over whole indexes) reads, under a pinned xmin horizon, every
-- dead row version of every job that ran since, at each call (10x slower).
SET enable_seqscan = off
-- One plan for every call, whatever the batch's size: a custom plan would
-- plan the partitioned statement again at each call, for each shard of the
-- batch (5 ms a call of 100 jobs over 8 shards); the generic one prunes to
-- the shard when it starts, and is linear in the batch (probes by id, pairs
-- checked in a hash, results found by id). No JIT for plans costed "disabled".
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    -- The lease is checked against the clock when the statement runs, as claim() reads it.
    v_live timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_config pgsched.config;
    v_scope text := pgsched._caller_scope();
    v_shard smallint;
    v_ids bigint[];
    v_tokens bigint[];
    v_by_id jsonb;
BEGIN
    SELECT * INTO v_config FROM pgsched.config;
    -- The results by job id, once for the call and found by a binary search
    -- (never a pass over the batch per job); none given, none built.
    IF complete.results IS NOT NULL THEN
        SELECT pg_catalog.jsonb_object_agg(u.id::text, u.result) INTO v_by_id
        FROM unnest(complete.job_ids, complete.results) AS u(id, result)
        WHERE u.id IS NOT NULL AND u.result IS NOT NULL;
    END IF;
    -- One statement per shard of the batch, in that shard's partition only.
    -- A job given without its shard gets it from one primary-key probe per
    -- partition (none found: NULL, and the job is not accepted).
    FOR v_shard, v_ids, v_tokens IN
        SELECT s.shard, pg_catalog.array_agg(s.id), pg_catalog.array_agg(s.token)
        FROM (
            SELECT u.id, u.token,
                   coalesce(u.shard, (SELECT f.shard FROM pgsched.jobs f WHERE f.id = u.id LIMIT 1)) AS shard
            FROM unnest(complete.job_ids, complete.tokens, complete.shards) AS u(id, token, shard)
            WHERE u.id IS NOT NULL
        ) s
        GROUP BY s.shard
        ORDER BY s.shard
    LOOP
        RETURN QUERY
        WITH input AS (
            SELECT u.id, u.token FROM unnest(v_ids, v_tokens) AS u(id, token)
        ), done AS (
            -- Checks the token in the statement that writes; a current token is a
            -- running job (jobs_state_valid: only a running job has one). The ids
            -- are the index condition: one probe each. No filter on state: a
            -- partial index "WHERE state = 'running'" would then be a candidate,
            -- and a scan of it reads the dead entries of every job that ran since
            -- the last vacuum. Each id with its own token, looked up in one hash
            -- of the batch: a join here would be planned for the ten rows a
            -- generic plan guesses, and pass over the batch once per job.
            DELETE FROM pgsched.jobs j
            WHERE j.shard = v_shard AND j.id = ANY (v_ids)
              AND ((j.id, j.lease_token) IN (SELECT u.id, u.token FROM input u)) IS TRUE
              AND j.lease_expires_at > v_live
              AND (v_scope IS NULL OR j.tenant = v_scope)  -- tokens are guessable, tenants are not
            RETURNING j.*, v_by_id -> (j.id::text) AS result
        ), history AS (
            INSERT INTO pgsched.job_history
                (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
                 leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule,
                 service, claimed_at, concurrency_key, timeout, progress, progress_note, progress_at, steps,
                 memory_limit, cpu_limit)
            SELECT d.id, d.shard, 'completed', d.queue, d.task, d.args, d.priority, d.run_at, d.attempt,
                   d.max_attempts, d.lease_token, d.leased_by, d.idempotency_key, d.labels, d.tenant,
                   -- a worker that never called start() ran it from its claim on
                   d.created_at, coalesce(d.started_at, d.claimed_at), v_now, d.result, NULL, d.schedule, d.service,
                   d.claimed_at, d.concurrency_key, d.timeout, d.progress, d.progress_note, d.progress_at, d.steps,
                   d.memory_limit, d.cpu_limit
            FROM done d
        ), keys AS (
            UPDATE pgsched.idempotency_keys k
            SET expires_at = CASE WHEN d.service OR k.scope = 'active' THEN v_now
                                  ELSE v_now + v_config.idempotency_retention END
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
    END LOOP;
    -- Dependents of what completed become due in this transaction; without
    -- any, one index probe. A statement of its own (see _release_dependents).
    IF EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.depends_on = ANY (complete.job_ids)) THEN
        PERFORM pgsched._release_dependents(complete.job_ids, v_now);
    END IF;
END
$$;

-- functions/configure_queue.sql
-- configure_queue
-- contract: sets the dispatch policy of queue `name` (docs/dispatch.md) and
-- returns it. Every setting defaults to NULL = left as it is; p_clear names
-- the settings to remove ('concurrency', 'key_concurrency', 'rate',
-- 'key_rate', 'aging', 'labels', or 'all'; tenant_fairness is turned off with
-- false). concurrency: at most N jobs of the queue leased at once across
-- workers (key_concurrency: per concurrency_key); rate / rate_period: at most
-- N starts per period (key_rate: per key, same period); aging: one priority
-- step per interval waited (NULL: strict priority); tenant_fairness: claims
-- share the queue between tenants, in proportion to tenant_weights (a JSON
-- object tenant -> weight, 0.001 <= weight <= 1000; missing tenants weigh 1;
-- replaced whole, cleared with p_clear 'tenant_weights'; giving them turns
-- fairness on unless tenant_fairness says otherwise), work-conserving;
-- labels: default labels of the queue's jobs.
-- Returns the settings as JSON (durations in seconds) with `restamped`.
-- A bad value raises invalid_parameter_value and changes nothing.
--
-- Aging, fairness and weights order the claim index, stamped when a job is
-- written (tg_jobs__dispatch): changing one re-stamps the queue's waiting jobs
-- once, here (`restamped` says how many), so claims never sort the backlog.
-- Admin only; refused for a session confined to a tenant.
DROP FUNCTION IF EXISTS pgsched.configure_queue(text, integer, integer, interval, interval, boolean, integer, integer,
                                               text[], text[]);
CREATE OR REPLACE FUNCTION pgsched.configure_queue(
    name            text,
    concurrency     integer  DEFAULT NULL,
    rate            integer  DEFAULT NULL,
    rate_period     interval DEFAULT NULL,
    aging           interval DEFAULT NULL,
    tenant_fairness boolean  DEFAULT NULL,
    key_concurrency integer  DEFAULT NULL,
    key_rate        integer  DEFAULT NULL,
    labels          text[]   DEFAULT NULL,
    p_clear         text[]   DEFAULT NULL,
    tenant_weights  jsonb    DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_clear text[] := coalesce(p_clear, '{}');
    v_old pgsched.queues;
    v_new pgsched.queues;
    v_bad text;
    v_restamped bigint := 0;
BEGIN
    PERFORM pgsched._check_unconfined('configure a queue (queues are shared by every tenant)');
    SELECT c INTO v_bad FROM unnest(v_clear) c
    WHERE c IS NULL OR c NOT IN ('concurrency', 'key_concurrency', 'rate', 'key_rate', 'aging', 'labels',
                                 'tenant_weights', 'all');
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: cannot clear %: p_clear takes concurrency, key_concurrency, rate, key_rate, aging, labels, tenant_weights or all',
            coalesce(pgsched._shown(v_bad), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.name IS NULL OR configure_queue.name !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$' THEN
        RAISE EXCEPTION 'pgsched: % is not a valid queue name', coalesce(pgsched._shown(configure_queue.name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.concurrency < 1 OR configure_queue.key_concurrency < 1
       OR configure_queue.concurrency > 1000000 OR configure_queue.key_concurrency > 1000000 THEN
        RAISE EXCEPTION 'pgsched: a concurrency limit is between 1 and 1000000 (clear it with p_clear)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.rate < 1 OR configure_queue.key_rate < 1
       OR configure_queue.rate > 10000 OR configure_queue.key_rate > 10000 THEN
        RAISE EXCEPTION 'pgsched: a rate is between 1 and 10000 starts per period (clear it with p_clear)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.rate_period < interval '1 millisecond' OR configure_queue.rate_period > interval '1 day' THEN
        RAISE EXCEPTION 'pgsched: rate_period % is not between 1 millisecond and 1 day', configure_queue.rate_period
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.aging < interval '1 millisecond' OR configure_queue.aging > interval '1 day' THEN
        RAISE EXCEPTION 'pgsched: aging % is not between 1 millisecond and 1 day (clear it for strict priority)',
            configure_queue.aging USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.labels IS NOT NULL THEN
        PERFORM pgsched._check_labels(configure_queue.labels);
    END IF;
    IF configure_queue.tenant_weights IS NOT NULL THEN
        IF pg_catalog.jsonb_typeof(configure_queue.tenant_weights) <> 'object' THEN
            RAISE EXCEPTION 'pgsched: tenant_weights must be a JSON object of tenant -> weight, not %',
                    pgsched._shown(configure_queue.tenant_weights::text)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT pg_catalog.format('%s: %s', pgsched._shown(w.key), w.value) INTO v_bad
        FROM pg_catalog.jsonb_each(configure_queue.tenant_weights) AS w(key, value)
        WHERE pg_catalog.jsonb_typeof(w.value) <> 'number' OR w.value::text::numeric < 0.001
           OR w.value::text::numeric > 1000
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgsched: tenant weight %: a weight is a number from 0.001 to 1000', v_bad
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;

    INSERT INTO pgsched.queues AS q (name) VALUES (configure_queue.name) ON CONFLICT ON CONSTRAINT queues_pkey DO NOTHING;
    SELECT * INTO v_old FROM pgsched.queues q WHERE q.name = configure_queue.name FOR UPDATE;
    v_new := v_old;
    IF 'all' = ANY (v_clear) THEN
        v_clear := ARRAY['concurrency', 'key_concurrency', 'rate', 'key_rate', 'aging', 'labels', 'tenant_weights'];
        v_new.tenant_fairness := false;
    END IF;
    v_new.concurrency := CASE WHEN 'concurrency' = ANY (v_clear) THEN NULL
                              ELSE coalesce(configure_queue.concurrency, v_old.concurrency) END;
    v_new.key_concurrency := CASE WHEN 'key_concurrency' = ANY (v_clear) THEN NULL
                                  ELSE coalesce(configure_queue.key_concurrency, v_old.key_concurrency) END;
    v_new.rate := CASE WHEN 'rate' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.rate, v_old.rate) END;
    v_new.key_rate := CASE WHEN 'key_rate' = ANY (v_clear) THEN NULL
                           ELSE coalesce(configure_queue.key_rate, v_old.key_rate) END;
    v_new.rate_period := CASE WHEN v_new.rate IS NULL AND v_new.key_rate IS NULL THEN NULL
                              ELSE coalesce(configure_queue.rate_period, v_old.rate_period) END;
    v_new.aging := CASE WHEN 'aging' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.aging, v_old.aging) END;
    -- Weights given turn fairness on, unless the call says otherwise.
    v_new.tenant_fairness := coalesce(configure_queue.tenant_fairness,
                                      CASE WHEN configure_queue.tenant_weights IS NOT NULL THEN true END,
                                      v_new.tenant_fairness);
    v_new.labels := CASE WHEN 'labels' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.labels, v_old.labels) END;
    v_new.tenant_weights := CASE WHEN 'tenant_weights' = ANY (v_clear) THEN NULL
                                 ELSE coalesce(configure_queue.tenant_weights, v_old.tenant_weights) END;
    IF configure_queue.rate_period IS NOT NULL AND v_new.rate IS NULL AND v_new.key_rate IS NULL THEN
        RAISE EXCEPTION 'pgsched: rate_period without a rate or key_rate' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (v_new.rate IS NOT NULL OR v_new.key_rate IS NOT NULL) AND v_new.rate_period IS NULL THEN
        RAISE EXCEPTION 'pgsched: a rate needs rate_period (N starts per period)' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    UPDATE pgsched.queues q
    SET concurrency = v_new.concurrency, key_concurrency = v_new.key_concurrency, rate = v_new.rate,
        key_rate = v_new.key_rate, rate_period = v_new.rate_period, aging = v_new.aging,
        tenant_fairness = v_new.tenant_fairness, labels = v_new.labels, tenant_weights = v_new.tenant_weights,
        updated_at = pg_catalog.now()
    WHERE q.name = configure_queue.name;
    IF v_new.rate IS NULL AND v_new.key_rate IS NULL THEN
        DELETE FROM pgsched.rate_windows w WHERE w.queue = configure_queue.name;
    ELSIF v_new.key_rate IS NULL THEN
        DELETE FROM pgsched.rate_windows w WHERE w.queue = configure_queue.name AND w.rate_key <> '';
    END IF;

    IF (v_new.aging, v_new.tenant_fairness) IS DISTINCT FROM (v_old.aging, v_old.tenant_fairness)
       OR (v_new.tenant_fairness AND v_new.tenant_weights IS DISTINCT FROM v_old.tenant_weights) THEN
        -- Setting queue to itself fires tg_jobs__dispatch (UPDATE OF queue).
        -- Leased jobs are left to their workers; they are stamped again when
        -- they come back with a new run_at.
        UPDATE pgsched.jobs j SET queue = j.queue
        WHERE j.queue = configure_queue.name AND j.state <> 'running';
        GET DIAGNOSTICS v_restamped = ROW_COUNT;
    END IF;

    RETURN pg_catalog.jsonb_build_object(
        'queue', configure_queue.name, 'concurrency', v_new.concurrency, 'key_concurrency', v_new.key_concurrency,
        'rate', v_new.rate, 'key_rate', v_new.key_rate,
        'rate_period_s', EXTRACT(epoch FROM v_new.rate_period),
        'aging_s', EXTRACT(epoch FROM v_new.aging), 'tenant_fairness', v_new.tenant_fairness,
        'tenant_weights', v_new.tenant_weights, 'labels', v_new.labels, 'restamped', v_restamped);
END
$$;

-- functions/dependency_outcomes.sql
-- dependency_outcomes
-- contract: for an active job (job_id) enqueued with depends_on, one row per
-- dependency, in id order: its id, where it is now (its active state, else
-- its latest outcome: completed, dead or cancelled) and that outcome's result
-- or error. What a batch callback (on_dependency_failure => 'run') reads as
-- ctx.dependencies. No rows for a job without dependencies, or one this
-- session cannot see; a dependency of another tenant than the session's is
-- left out (a session confined to a tenant sees only its own jobs).
CREATE OR REPLACE FUNCTION pgsched.dependency_outcomes(job_id bigint)
RETURNS TABLE (id bigint, state text, result jsonb, error text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT d.id, coalesce(a.state::text, h.state::text), h.result, coalesce(h.error, a.last_error)
    FROM pgsched.jobs j
    CROSS JOIN LATERAL (SELECT DISTINCT u.id FROM unnest(j.depends_on) AS u(id)) d
    LEFT JOIN LATERAL (SELECT x.state, x.last_error, x.tenant FROM pgsched.jobs x
                       WHERE x.id OPERATOR(pg_catalog.=) d.id LIMIT 1) a ON true
    LEFT JOIN LATERAL (SELECT y.state, y.result, y.error, y.tenant FROM pgsched.job_history y
                       WHERE a.state IS NULL AND y.id OPERATOR(pg_catalog.=) d.id
                       ORDER BY y.finished_at DESC LIMIT 1) h ON true
    WHERE j.id OPERATOR(pg_catalog.=) dependency_outcomes.job_id
      AND pgsched._tenant_visible(j.tenant)
      AND pgsched._tenant_visible(coalesce(a.tenant, h.tenant))
      AND (a.state IS NOT NULL OR h.state IS NOT NULL)
    ORDER BY d.id
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
        RETURNING j.id, j.queue, j.attempt, e.leased_by, e.lease_token, e.lease_expires_at, j.claimed_at
    ), audit AS (
        -- the attempt's claim (not recorded while it ran: job_timeline), then its expiry
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        SELECT r.id, ev.at, ev.kind, r.attempt, r.leased_by, r.lease_token, ev.detail
        FROM requeued r
        CROSS JOIN pgsched.config c
        CROSS JOIN LATERAL (VALUES
            (1, r.claimed_at, 'claimed', NULL::jsonb),
            (2, v_now, 'lease_expired',
             pg_catalog.jsonb_build_object('lease_expires_at', r.lease_expires_at, 'outcome', 'available'))
        ) AS ev(step, at, kind, detail)
        WHERE c.audit AND ev.at IS NOT NULL
        ORDER BY r.id, ev.step
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
-- nothing and returns 'lease_lost', as does a lease that has run out (even
-- before expire_leases handed the job back: its slot is already free). A result (a command's exit code and
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
    -- The lease is checked against the clock when the statement runs, as claim() reads it.
    v_live timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_scope text := pgsched._caller_scope();
BEGIN
    UPDATE pgsched.jobs j
    SET run_at = v.run_at,
        state = CASE WHEN v.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
        last_error = fail.error
    FROM (
        SELECT j2.id, j2.shard, j2.leased_by,
               coalesce(fail.retry_at, v_now + pgsched._backoff(j2.task, j2.queue, j2.attempt, j2.tenant)) AS run_at
        FROM pgsched.jobs j2
        WHERE j2.id = fail.job_id AND j2.lease_token = fail.token
          AND (v_scope IS NULL OR j2.tenant = v_scope)
    ) v
    WHERE j.id = v.id AND j.shard = v.shard
      AND j.lease_token = fail.token AND j.state = 'running' AND j.lease_expires_at > v_live
      AND NOT coalesce(fail.final, false)
      AND j.attempt < j.max_attempts
      AND j.cancel_requested_at IS NULL
    RETURNING j.state, j.attempt, j.queue, j.run_at, v.leased_by, j.claimed_at
    INTO v_state, v_job.attempt, v_job.queue, v_job.run_at, v_job.leased_by, v_job.claimed_at;
    IF FOUND THEN
        -- the attempt did not complete: its claim is recorded now (job_timeline)
        PERFORM pgsched._event(fail.job_id, v_job.claimed_at, 'claimed', v_job.attempt, v_job.leased_by, fail.token)
        WHERE v_job.claimed_at IS NOT NULL;
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
      AND j.lease_expires_at > v_live
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

-- functions/find_jobs.sql
-- find_jobs
-- contract: the jobs, active or finished, matching every filter given (NULL:
-- any), newest id first: the task (exact, or a prefix ending in '*'), states,
-- queue, tenant, args containing p_args (jsonb @>), and a time range
-- [p_since, p_until) on when the job was enqueued (p_time 'created', the
-- default), became due ('due') or finished ('finished': finished jobs only).
-- A finished job appears once, as its latest run, and not at all while a
-- redrive of it is active. Keyset pagination: p_before is the last id of the
-- previous page; p_max_id bounds the set (so a confirmed bulk action touches
-- only the jobs that were there). A page is 1 to 10000 jobs (p_limit; NULL
-- would be every match, a scan of the whole history): larger sets are read
-- page by page. Runs with the caller's rights: row-level security confines a
-- tenant-bound session to its tenant.
CREATE OR REPLACE FUNCTION pgsched.find_jobs(
    p_task   text        DEFAULT NULL,
    p_states text[]      DEFAULT NULL,
    p_queue  text        DEFAULT NULL,
    p_tenant text        DEFAULT NULL,
    p_args   jsonb       DEFAULT NULL,
    p_since  timestamptz DEFAULT NULL,
    p_until  timestamptz DEFAULT NULL,
    p_time   text        DEFAULT 'created',
    p_before bigint      DEFAULT NULL,
    p_max_id bigint      DEFAULT NULL,
    p_limit  integer     DEFAULT 50
)
RETURNS TABLE (id bigint, queue text, state text, task text, args jsonb, priority integer, attempt integer,
               max_attempts integer, run_at timestamptz, worker text, error text, tenant text,
               created_at timestamptz, finished_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'pgsched: find_jobs p_limit must be between 1 and 10000, not %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Read more page by page: p_before => the last id of the previous page.';
    END IF;
    RETURN QUERY
    WITH active AS (
        SELECT j.id, j.queue, j.state::text AS state, j.task, j.args, j.priority, j.attempt, j.max_attempts,
               j.run_at, j.leased_by AS worker, j.last_error AS error, j.tenant, j.created_at,
               NULL::timestamptz AS finished_at
        FROM pgsched.jobs j
        WHERE (p_task IS NULL OR j.task = p_task
               OR (right(p_task, 1) = '*' AND starts_with(j.task, rtrim(p_task, '*'))))
          AND (p_states IS NULL OR j.state::text = ANY(p_states))
          AND (p_queue IS NULL OR j.queue = p_queue)
          AND (p_tenant IS NULL OR j.tenant = p_tenant)
          AND (p_args IS NULL OR j.args @> p_args)
          AND (p_since IS NULL AND p_until IS NULL OR p_time IS DISTINCT FROM 'finished')
          AND (p_since IS NULL OR CASE p_time WHEN 'due' THEN j.run_at ELSE j.created_at END >= p_since)
          AND (p_until IS NULL OR CASE p_time WHEN 'due' THEN j.run_at ELSE j.created_at END < p_until)
          AND (p_before IS NULL OR j.id < p_before)
          AND (p_max_id IS NULL OR j.id <= p_max_id)
        ORDER BY j.id DESC
        LIMIT p_limit
    ), finished AS (
        SELECT h.id, h.queue, h.state::text AS state, h.task, h.args, h.priority, h.attempt, h.max_attempts,
               h.run_at, h.leased_by AS worker, h.error, h.tenant, h.created_at, h.finished_at
        FROM pgsched.job_history h
        WHERE (p_task IS NULL OR h.task = p_task
               OR (right(p_task, 1) = '*' AND starts_with(h.task, rtrim(p_task, '*'))))
          AND (p_states IS NULL OR h.state::text = ANY(p_states))
          AND (p_queue IS NULL OR h.queue = p_queue)
          AND (p_tenant IS NULL OR h.tenant = p_tenant)
          AND (p_args IS NULL OR h.args @> p_args)
          AND (p_since IS NULL OR CASE p_time WHEN 'due' THEN h.run_at WHEN 'finished' THEN h.finished_at
                                  ELSE h.created_at END >= p_since)
          AND (p_until IS NULL OR CASE p_time WHEN 'due' THEN h.run_at WHEN 'finished' THEN h.finished_at
                                  ELSE h.created_at END < p_until)
          AND (p_before IS NULL OR h.id < p_before)
          AND (p_max_id IS NULL OR h.id <= p_max_id)
          AND NOT EXISTS (SELECT 1 FROM pgsched.job_history n WHERE n.id = h.id AND n.finished_at > h.finished_at)
          AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
        ORDER BY h.id DESC
        LIMIT p_limit
    )
    SELECT * FROM (SELECT * FROM active UNION ALL SELECT * FROM finished) f
    ORDER BY f.id DESC
    LIMIT p_limit;
END
$$;

-- functions/heartbeat.sql
-- heartbeat
-- contract: extends the lease of each (job_id, token) pair that still holds
-- its lease, in one statement for all of a worker's running jobs. Returns one
-- row per input job: whether the lease is still held (false: the job was
-- expired, taken over or finished elsewhere, and its result must be
-- discarded) and whether cancellation was requested. Rows another statement
-- has locked right now (the worker's own completion of that job, a cancel)
-- are skipped rather than waited for, so heartbeats never deadlock with
-- completions; such a job still counts as held when its token is current in
-- this statement's snapshot, and the next heartbeat extends it.
-- A lease that has run out is not held, whether or not expire_leases has
-- handed the job back yet: from that moment claim() counts its slot free
-- (a queue's concurrency limit), so extending it would let two leases
-- stand where one was allowed.
CREATE OR REPLACE FUNCTION pgsched.heartbeat(
    job_ids bigint[],
    tokens  bigint[],
    lease   interval,
    worker  text        DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, held boolean, cancel_requested boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- The jobs are found by their ids (an array: one primary key probe each),
-- never by reading a partition whole, whatever the statistics say: while
-- something pins the xmin horizon a partition holds hundreds of thousands
-- of dead row versions that an ANALYZE does not count, and such a plan
-- took a second a call.
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    -- The lease is checked against the clock when the statement runs, as claim() reads it.
    v_live timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_scope text := pgsched._caller_scope();
BEGIN
    IF heartbeat.worker IS NOT NULL THEN
        UPDATE pgsched.workers w
        SET last_seen = v_now, running = coalesce(pg_catalog.cardinality(heartbeat.job_ids), 0)
        WHERE w.name = heartbeat.worker;
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token FROM unnest(heartbeat.job_ids, heartbeat.tokens) AS u(id, token)
    ), current AS MATERIALIZED (
        -- A current token is a running job's (jobs_state_valid), so no filter
        -- on state: with one, the planner may scan the running rows' partial
        -- indexes, dead entries and all, instead of probing the primary key.
        SELECT j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
        FROM pgsched.jobs j
        JOIN input u ON j.id = u.id AND j.lease_token = u.token
        WHERE j.id = ANY (heartbeat.job_ids)
          AND j.lease_expires_at > v_live AND (v_scope IS NULL OR j.tenant = v_scope)
    ), locked AS MATERIALIZED (
        SELECT j.id
        FROM pgsched.jobs j
        JOIN input u ON j.id = u.id AND j.lease_token = u.token
        WHERE j.id = ANY (heartbeat.job_ids)
          AND j.lease_expires_at > v_live AND (v_scope IS NULL OR j.tenant = v_scope)
        FOR UPDATE OF j SKIP LOCKED
    ), extended AS (
        -- The locked rows, by their ids alone (ids are unique), in one probe of each partition: no join
        -- that pairs each row with its shard, which made PostgreSQL 18 prune the partitions again for
        -- every row, a path that crashed a backend (perform_pruning_base_step, 18.4).
        UPDATE pgsched.jobs j
        SET lease_expires_at = v_now + heartbeat.lease
        WHERE j.id = ANY (ARRAY(SELECT k.id FROM locked k))
        RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
    )
    SELECT u.id, e.id IS NOT NULL OR c.id IS NOT NULL, coalesce(e.cancel_requested, c.cancel_requested, false)
    FROM input u
    LEFT JOIN extended e ON e.id = u.id
    LEFT JOIN current c ON c.id = u.id;
END
$$;

-- functions/job.sql
-- job
-- contract: job p_id wherever it is: its active row in pgsched.jobs, else
-- its latest row in pgsched.job_history (a redriven job has one per finished
-- run; runs finished in one transaction are told apart by their fencing
-- token, which grows with every claim). No row for an id that never was, is
-- not committed yet, was pruned, or belongs to a tenant this session cannot
-- see. stored_in names the table the row came from; a column one table lacks
-- is NULL (an active job has no result or finished_at, a finished one no
-- lease expiry); error is the active job's last_error or the run's error.
-- SECURITY DEFINER, like dependency_outcomes: it reads as the owner, whom
-- row-level security does not confine, so it confines tenants itself
-- (_tenant_visible), as the policies would. Each half is an index probe by
-- id: a job enqueued now and one finished last week cost the same.
CREATE OR REPLACE FUNCTION pgsched.job(p_id bigint)
RETURNS TABLE (id bigint, shard smallint, state text, queue text, task text, args jsonb, priority integer,
               run_at timestamptz, attempt integer, max_attempts integer, tenant text, created_at timestamptz,
               started_at timestamptz, finished_at timestamptz, result jsonb, error text, leased_by text,
               lease_token bigint, lease_expires_at timestamptz, cancel_requested_at timestamptz,
               idempotency_key text, labels text[], schedule text, service boolean, progress real,
               progress_note text, progress_at timestamptz, steps jsonb, stored_in text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT f.id, f.shard, f.state, f.queue, f.task, f.args, f.priority, f.run_at, f.attempt, f.max_attempts,
           f.tenant, f.created_at, f.started_at, f.finished_at, f.result, f.error, f.leased_by, f.lease_token,
           f.lease_expires_at, f.cancel_requested_at, f.idempotency_key, f.labels, f.schedule, f.service,
           f.progress, f.progress_note, f.progress_at, f.steps, f.stored_in
    FROM (
        SELECT 0 AS rank, j.id, j.shard, j.state::text AS state, j.queue, j.task, j.args, j.priority, j.run_at,
               j.attempt, j.max_attempts, j.tenant, j.created_at, j.started_at, NULL::timestamptz AS finished_at,
               NULL::jsonb AS result, j.last_error AS error, j.leased_by, j.lease_token, j.lease_expires_at,
               j.cancel_requested_at, j.idempotency_key, j.labels, j.schedule, j.service, j.progress,
               j.progress_note, j.progress_at, j.steps, 'jobs'::text AS stored_in
        FROM pgsched.jobs j
        WHERE j.id OPERATOR(pg_catalog.=) p_id AND pgsched._tenant_visible(j.tenant)
        UNION ALL
        (SELECT 1, h.id, h.shard, h.state::text, h.queue, h.task, h.args, h.priority, h.run_at,
                h.attempt, h.max_attempts, h.tenant, h.created_at, h.started_at, h.finished_at,
                h.result, h.error, h.leased_by, h.lease_token, NULL::timestamptz,
                NULL::timestamptz, h.idempotency_key, h.labels, h.schedule, h.service, h.progress,
                h.progress_note, h.progress_at, h.steps, 'job_history'::text
         FROM pgsched.job_history h
         WHERE h.id OPERATOR(pg_catalog.=) p_id AND pgsched._tenant_visible(h.tenant)
         ORDER BY h.finished_at DESC, h.lease_token DESC NULLS LAST
         LIMIT 1)
    ) f
    ORDER BY f.rank
    LIMIT 1
$$;

-- functions/maintain.sql
-- maintain
-- contract: the housekeeping that keeps tables small and bounded, safe to run
-- from any number of processes at once (they take turns on a
-- transaction-scoped advisory lock, so it also works through PgBouncer):
-- creates day partitions of job_history, job_events and queue_minutes from yesterday to
-- partitions_ahead days ahead, and for any day whose rows wait in a default
-- partition; drops the partitions older than their retention; forgets
-- idempotency keys whose retention ran out and workers unseen for a day.
-- Returns what it did as one JSON object.
CREATE OR REPLACE FUNCTION pgsched.maintain(p_now timestamptz DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_today date := (v_now AT TIME ZONE 'UTC')::date;
    v_config pgsched.config;
    v_created integer := 0;
    v_dropped text[] := '{}';
    v_keys integer;
    v_workers integer;
    v_part record;
    v_retention interval;
    v_lock_timeout text;
    v_day date;
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgsched.maintain')) THEN
        RETURN pg_catalog.jsonb_build_object('skipped', 'another maintain() is running');
    END IF;
    SELECT * INTO v_config FROM pgsched.config;

    -- Rows written while their day had no partition (maintain() did not run
    -- for a while, or a caller passed a time outside the window) wait in the
    -- default partitions; give their days partitions too, so they are filed
    -- and retention reaches them. Normally the default partitions are empty.
    FOR v_day IN SELECT DISTINCT (h.finished_at AT TIME ZONE 'UTC')::date FROM pgsched.job_history_default h LOOP
        IF pgsched._ensure_day_partition('job_history', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;
    FOR v_day IN SELECT DISTINCT (e.at AT TIME ZONE 'UTC')::date FROM pgsched.job_events_default e LOOP
        IF pgsched._ensure_day_partition('job_events', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;
    FOR v_day IN SELECT DISTINCT (m.minute AT TIME ZONE 'UTC')::date FROM pgsched.queue_minutes_default m LOOP
        IF pgsched._ensure_day_partition('queue_minutes', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;

    FOR d IN -1 .. v_config.partitions_ahead LOOP
        IF pgsched._ensure_day_partition('job_history', v_today + d) THEN v_created := v_created + 1; END IF;
        IF pgsched._ensure_day_partition('job_events', v_today + d) THEN v_created := v_created + 1; END IF;
        IF pgsched._ensure_day_partition('queue_minutes', v_today + d) THEN v_created := v_created + 1; END IF;
    END LOOP;

    -- A partition goes when its whole day is older than the retention.
    FOR v_part IN
        SELECT c.relname, p.relname AS parent,
               pg_catalog.to_date(pg_catalog.right(c.relname, 8), 'YYYYMMDD') AS day
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
        JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
        JOIN pg_catalog.pg_namespace n ON n.oid = p.relnamespace
        WHERE n.nspname = 'pgsched' AND p.relname IN ('job_history', 'job_events', 'queue_minutes')
          AND c.relname ~ '_p[0-9]{8}$'
    LOOP
        v_retention := CASE v_part.parent WHEN 'job_history' THEN v_config.history_retention
                                          WHEN 'queue_minutes' THEN v_config.queue_history_retention
                                          ELSE v_config.events_retention END;
        IF ((v_part.day + 1)::timestamp AT TIME ZONE 'UTC') <= v_now - v_retention THEN
            -- Dropping a partition locks its parent for a moment; never queue
            -- behind a long reader, try again at the next run instead.
            v_lock_timeout := pg_catalog.current_setting('lock_timeout');
            BEGIN
                PERFORM pg_catalog.set_config('lock_timeout', '2s', true);
                EXECUTE pg_catalog.format('DROP TABLE pgsched.%I', v_part.relname);
                v_dropped := v_dropped || v_part.relname::text;
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'pgsched: % is busy; it will be dropped later', v_part.relname;
            END;
            PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
        END IF;
    END LOOP;

    WITH gone AS (
        DELETE FROM pgsched.idempotency_keys k
        WHERE (k.key, k.job_id) IN (SELECT k2.key, k2.job_id FROM pgsched.idempotency_keys k2
                                    WHERE k2.expires_at < v_now LIMIT 50000)
        RETURNING 1
    )
    SELECT pg_catalog.count(*) INTO v_keys FROM gone;

    DELETE FROM pgsched.workers w WHERE w.last_seen < v_now - interval '1 day';
    GET DIAGNOSTICS v_workers = ROW_COUNT;

    RETURN pg_catalog.jsonb_build_object(
        'partitions_created', v_created, 'partitions_dropped', pg_catalog.to_jsonb(v_dropped),
        'idempotency_keys_pruned', v_keys, 'workers_pruned', v_workers);
END
$$;

-- functions/next_due.sql
-- next_due
-- contract: the earliest run_at among scheduled jobs (NULL when there are
-- none): one probe of each shard's scheduled index, so a scanner can sleep
-- exactly until then.
CREATE OR REPLACE FUNCTION pgsched.next_due(p_shard integer DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_shard IS NULL THEN
        RETURN (SELECT pg_catalog.min(j.run_at) FROM pgsched.jobs j WHERE j.state = 'scheduled');
    END IF;
    RETURN (SELECT pg_catalog.min(j.run_at) FROM pgsched.jobs j WHERE j.state = 'scheduled' AND j.shard = p_shard);
END
$$;

-- functions/next_start.sql
-- next_start
-- contract: when every one of `queues` (paused ones aside) is at its rate
-- limit, the moment the first of them may start a job again (its oldest
-- start in the window plus rate_period); NULL as soon as one of them has no
-- rate limit or room under it. A worker whose claim came back short sleeps
-- until then instead of claiming again in vain (per-key rates are not
-- counted: other keys may still start).
CREATE OR REPLACE FUNCTION pgsched.next_start(queues text[], p_now timestamptz DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_next timestamptz;
    v_open boolean;
BEGIN
    SELECT pg_catalog.bool_or(f.next IS NULL), pg_catalog.min(f.next) INTO v_open, v_next
    FROM unnest(next_start.queues) u(name)
    LEFT JOIN pgsched.queues q ON q.name = u.name
    CROSS JOIN LATERAL (
        SELECT CASE WHEN q.rate IS NULL OR pg_catalog.cardinality(s.kept) < q.rate THEN NULL
                    ELSE s.kept[1] + q.rate_period END AS next
        FROM (SELECT ARRAY(SELECT t FROM pgsched.rate_windows w, unnest(w.starts) t
                           WHERE w.queue = q.name AND w.rate_key = '' AND t > v_now - q.rate_period
                           ORDER BY t) AS kept) s
    ) f
    WHERE q.paused IS NOT TRUE;
    IF v_open IS NOT FALSE THEN
        RETURN NULL;
    END IF;
    RETURN v_next;
END
$$;

-- functions/pass_over.sql
-- pass_over
-- contract: a worker hands back running jobs of tasks it does not know (two
-- applications sharing a queue, a worker serving '*'), each under its
-- fencing token, for a worker that knows the task: the attempt is given
-- back (max_attempts grows by one, as snooze), the job is due again shortly,
-- and no dependent is touched. Returns one row per job, in id order: its new
-- state ('scheduled'), 'dead', 'cancelled' (its cancel had been requested)
-- or 'lease_lost'.
--
-- A job is unserved while no live worker (seen within the last minute, as
-- workers_live) of its queue has registered its task (pgsched.workers.tasks;
-- a worker that reports none may know any task). unserved_since records
-- when a pass-over first found it so, and is cleared when one finds a worker
-- that knows it, or when a run starts. Only a job unserved for
-- pgsched.config.unserved_task_timeout goes dead ('unknown task ...'); until
-- then it comes back at most every 30 seconds to be asked again, and a job
-- some live worker knows comes back after a second, for that worker.
CREATE OR REPLACE FUNCTION pgsched.pass_over(
    job_ids bigint[],
    tokens  bigint[],
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_scope text := pgsched._caller_scope();
    v_timeout interval;
    v_pair record;
    v_job pgsched.jobs;
    v_error text;
BEGIN
    SELECT c.unserved_task_timeout INTO v_timeout FROM pgsched.config c;
    FOR v_pair IN SELECT u.id, u.token FROM unnest(pass_over.job_ids, pass_over.tokens) AS u(id, token)
                  WHERE u.id IS NOT NULL ORDER BY u.id LOOP
        UPDATE pgsched.jobs j
        SET unserved_since = CASE
            WHEN EXISTS (SELECT 1 FROM pgsched.workers w
                         WHERE w.last_seen > v_now - interval '1 minute'
                           AND w.name IS DISTINCT FROM j.leased_by
                           AND (j.queue = ANY (w.queues) OR '*' = ANY (w.queues))
                           AND (w.tasks IS NULL OR j.task = ANY (w.tasks)))
            THEN NULL ELSE coalesce(j.unserved_since, v_now) END
        WHERE j.id = v_pair.id AND j.lease_token = v_pair.token AND j.state = 'running'
          AND (v_scope IS NULL OR j.tenant = v_scope)
        RETURNING j.* INTO v_job;
        IF NOT FOUND THEN
            job_id := v_pair.id;
            outcome := 'lease_lost';
        ELSIF v_job.unserved_since IS NOT NULL AND v_now - v_job.unserved_since >= v_timeout
              AND v_job.cancel_requested_at IS NULL THEN
            DELETE FROM pgsched.jobs j
            WHERE j.id = v_pair.id AND j.lease_token = v_pair.token AND j.state = 'running'
            RETURNING j.* INTO v_job;
            v_error := pg_catalog.format('unknown task %L: no live worker has registered it for %s',
                                         v_job.task, v_timeout);
            PERFORM pgsched._finish(v_job, 'dead', v_now, v_error, NULL,
                pg_catalog.jsonb_build_object('error', v_error, 'reason', 'unserved'));
            job_id := v_pair.id;
            outcome := 'dead';
        ELSE
            job_id := v_pair.id;
            outcome := pgsched._put_back(v_pair.id, v_pair.token,
                v_now + CASE WHEN v_job.unserved_since IS NULL THEN interval '1 second'
                             ELSE least(v_timeout - (v_now - v_job.unserved_since), interval '30 seconds') END,
                'passed_over', v_now);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- functions/pause_queue.sql
-- pause_queue
-- contract: stops claims from a queue (jobs can still be enqueued) until
-- resume_queue(); takes effect at each worker's next claim. Returns true.
-- Refused for a session confined to a tenant.
CREATE OR REPLACE FUNCTION pgsched.pause_queue(queue text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT pgsched._check_unconfined('pause a queue (queues are shared by every tenant)');
    INSERT INTO pgsched.queues AS q (name, paused, updated_at)
    VALUES (pause_queue.queue, true, pg_catalog.now())
    ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = EXCLUDED.updated_at
    RETURNING true
$$;

-- functions/pause_schedule.sql
-- pause_schedule
-- contract: stops a schedule from firing (its not-yet-due occurrences are
-- withdrawn at the next scan) until resume_schedule(). Returns whether the
-- schedule exists (for a session confined to a tenant: one of its tenant).
CREATE OR REPLACE FUNCTION pgsched.pause_schedule(name text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    WITH changed AS (
        UPDATE pgsched.schedules s SET enabled = false
        WHERE s.name = pause_schedule.name AND pgsched._tenant_visible(s.tenant)
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM changed)
$$;

-- functions/promote_due.sql
-- promote_due
-- contract: makes scheduled jobs whose run_at has come 'available' and wakes
-- workers of their queues (one NOTIFY per queue). Reads only due rows of the
-- scheduled index, so a backlog of far-future jobs costs nothing. Returns the
-- number promoted (at most p_limit; call again while it is p_limit).
--
-- Occurrences of recurring schedules (docs/schedules.md) first meet the
-- misfire policy when they are missed (due more than misfire_grace ago, as
-- nothing promoted them in time): 'skip' drops every missed one, 'latest'
-- keeps the most recent missed one, 'all' the misfire_cap most recent missed
-- ones; on-time occurrences never count against the cap and are never
-- dropped by it. A missed occurrence is decided once (its occurrence row says
-- 'misfire_fired' or 'skipped_misfire'), and, while the schedule is enabled,
-- not before it is expanded up to now, so the policy sees the whole missed
-- window. Then the
-- concurrency policy, when another run of the schedule is queued or running:
-- 'allow' promotes anyway; under 'skip', 'queue' and 'replace' the catch-up
-- runs ('misfire_fired') go one after another, each waiting for the previous
-- one, and are never skipped or replaced; the first on-time occurrence due
-- during catch-up waits behind it ('queued') and runs next. Otherwise 'skip'
-- cancels the occurrence, 'queue' keeps one occurrence waiting and skips the
-- rest, 'replace' cancels the previous run and promotes this one. A waiting
-- occurrence keeps its run_at (its fire time, ctx.scheduled_at) and is looked
-- at again at every call. Each decision is recorded in
-- pgsched.schedule_occurrences.
CREATE OR REPLACE FUNCTION pgsched.promote_due(
    p_now   timestamptz DEFAULT NULL,
    p_limit integer     DEFAULT 10000,
    p_shard integer     DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_count integer;
    v_queues text[];
    v_occ record;
    v_policy text;
    v_sched record;
    v_later integer;
    v_skip text;
    v_busy boolean;
    v_job pgsched.jobs;
    v_prev record;
    v_decision text;
    v_waiting text[] := '{}';
BEGIN
    WITH due AS MATERIALIZED (
        SELECT j.id, j.shard
        FROM pgsched.jobs j
        WHERE j.state = 'scheduled' AND j.run_at <= v_now AND j.schedule IS NULL
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.run_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), promoted AS (
        UPDATE pgsched.jobs j
        SET state = 'available'
        FROM due
        WHERE j.id = due.id AND j.shard = due.shard AND j.state = 'scheduled' AND j.run_at <= v_now
        RETURNING j.queue
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT p.queue)
    INTO v_count, v_queues
    FROM promoted p;

    -- Schedule occurrences: few per tick, one at a time in due order.
    FOR v_occ IN
        SELECT j.id, j.shard, j.schedule, j.run_at, j.queue
        FROM pgsched.jobs j
        WHERE j.state = 'scheduled' AND j.run_at <= v_now AND j.schedule IS NOT NULL
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        -- A later occurrence of a schedule already found waiting waits too (catch-up, or queued).
        SELECT o.decision INTO v_decision FROM pgsched.schedule_occurrences o
        WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
        IF v_occ.schedule = ANY(v_waiting) AND v_decision IN ('misfire_fired', 'queued') THEN
            CONTINUE;
        END IF;
        SELECT s.concurrency, s.misfire_policy, s.misfire_cap, s.misfire_grace, s.expanded_until, s.enabled
        INTO v_sched
        FROM pgsched.schedules s WHERE s.name = v_occ.schedule;
        v_policy := coalesce(v_sched.concurrency, 'allow');

        IF v_decision = 'fire' AND v_occ.run_at < v_now - v_sched.misfire_grace THEN
            IF v_sched.enabled AND (v_sched.expanded_until IS NULL OR v_sched.expanded_until < v_now) THEN
                CONTINUE;  -- not expanded up to now: decide once the whole missed window is known
            END IF;
            -- Later missed occurrences still to run (on-time or queued ones do not count).
            SELECT pg_catalog.count(*) INTO v_later
            FROM pgsched.jobs w
            JOIN pgsched.schedule_occurrences o
              ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
            WHERE w.schedule = v_occ.schedule AND w.state IN ('scheduled', 'available', 'running')
              AND w.run_at < v_now - v_sched.misfire_grace AND (w.run_at, w.id) > (v_occ.run_at, v_occ.id)
              AND o.decision IN ('fire', 'misfire_fired');
            IF v_sched.misfire_policy = 'skip'
               OR (v_sched.misfire_policy = 'latest' AND v_later > 0)
               OR (v_sched.misfire_policy = 'all' AND v_later >= v_sched.misfire_cap) THEN
                v_skip := pg_catalog.format('misfire policy %s: due at %s, missed by more than %s',
                                            v_sched.misfire_policy, v_occ.run_at, v_sched.misfire_grace);
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now, 'skipped: ' || v_skip);
                    UPDATE pgsched.schedule_occurrences o
                    SET decision = 'skipped_misfire', decided_at = v_now, reason = v_skip
                    WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
                END IF;
                CONTINUE;
            END IF;
            v_decision := 'misfire_fired';
            UPDATE pgsched.schedule_occurrences o
            SET decision = 'misfire_fired', decided_at = v_now,
                reason = pg_catalog.format('missed (due %s, nothing promoted it in time); misfire policy %s',
                                           v_occ.run_at, v_sched.misfire_policy)
            WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
        END IF;

        v_busy := v_policy <> 'allow' AND EXISTS (
            SELECT 1 FROM pgsched.jobs o
            WHERE o.schedule = v_occ.schedule AND o.id <> v_occ.id AND o.state IN ('available', 'running'));

        IF NOT v_busy THEN
            UPDATE pgsched.jobs j SET state = 'available'
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled';
            v_queues := pg_catalog.array_append(v_queues, v_occ.queue);
            v_count := v_count + 1;
        ELSIF v_decision IN ('misfire_fired', 'queued') THEN
            -- Catch-up goes one run after another; a queued occurrence waits its turn.
            v_waiting := pg_catalog.array_append(v_waiting, v_occ.schedule);
        ELSIF v_policy = 'queue' OR EXISTS (
                SELECT 1 FROM pgsched.jobs w
                JOIN pgsched.schedule_occurrences o
                  ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
                WHERE w.schedule = v_occ.schedule AND w.id <> v_occ.id
                  AND w.state IN ('scheduled', 'available', 'running') AND o.decision = 'misfire_fired') THEN
            -- Queue, or catch-up in progress: one occurrence waits, the others are skipped.
            IF EXISTS (
                SELECT 1 FROM pgsched.jobs w
                JOIN pgsched.schedule_occurrences o
                  ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
                WHERE w.schedule = v_occ.schedule AND w.id <> v_occ.id AND w.state = 'scheduled'
                  AND o.decision = 'queued') THEN
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now,
                        'skipped: one occurrence of this schedule is already queued');
                    UPDATE pgsched.schedule_occurrences o
                    SET decision = 'skipped_overlap', decided_at = v_now,
                        reason = pg_catalog.format('concurrency policy %s: another occurrence is already waiting',
                                                   v_policy)
                    WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
                END IF;
            ELSE
                UPDATE pgsched.schedule_occurrences o
                SET decision = 'queued', decided_at = v_now,
                    reason = pg_catalog.format('concurrency policy %s: waiting for the previous run%s', v_policy,
                                               CASE WHEN v_policy = 'queue' THEN '' ELSE ' (catch-up in progress)' END)
                WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
                v_waiting := pg_catalog.array_append(v_waiting, v_occ.schedule);
            END IF;
        ELSIF v_policy = 'skip' THEN
            DELETE FROM pgsched.jobs j
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
            RETURNING j.* INTO v_job;
            IF FOUND THEN
                PERFORM pgsched._finish(v_job, 'cancelled', v_now,
                    'skipped: the previous run of this schedule was still going');
                UPDATE pgsched.schedule_occurrences o
                SET decision = 'skipped_overlap', decided_at = v_now,
                    reason = 'concurrency policy skip: previous run still going'
                WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
            END IF;
        ELSE  -- replace
            FOR v_prev IN
                SELECT o.id, o.shard FROM pgsched.jobs o
                WHERE o.schedule = v_occ.schedule AND o.id <> v_occ.id AND o.state IN ('available', 'running')
                ORDER BY o.id
            LOOP
                -- Not started yet: filed as cancelled with the reason; running: asked to stop.
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_prev.id AND j.shard = v_prev.shard AND j.state = 'available'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now, pg_catalog.format(
                        'replaced by the occurrence due at %s (concurrency policy replace)', v_occ.run_at));
                ELSE
                    UPDATE pgsched.jobs j SET cancel_requested_at = coalesce(j.cancel_requested_at, v_now)
                    WHERE j.id = v_prev.id AND j.shard = v_prev.shard AND j.state = 'running'
                    RETURNING j.* INTO v_job;
                    IF FOUND THEN
                        PERFORM pgsched._event(v_job.id, v_now, 'cancel_requested', v_job.attempt,
                                               v_job.leased_by, v_job.lease_token);
                    END IF;
                END IF;
            END LOOP;
            UPDATE pgsched.jobs j SET state = 'available'
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled';
            UPDATE pgsched.schedule_occurrences o
            SET decision = 'replaced_previous', decided_at = v_now,
                reason = 'concurrency policy replace: previous run cancelled'
            WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
            v_queues := pg_catalog.array_append(v_queues, v_occ.queue);
            v_count := v_count + 1;
        END IF;
    END LOOP;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM (SELECT DISTINCT q FROM unnest(v_queues) q) d;
    RETURN v_count;
END
$$;

-- functions/read_events.sql
-- read_events
-- contract: the terminal transitions (completed, dead, cancelled) filed
-- after position p_after, gap-free and each once: whole transactions, in
-- transaction-id order, and only from transactions older than every one
-- still in flight, so nothing can later appear behind a position returned.
-- position is the id of the transaction that filed the row (0 reads from
-- the oldest history kept); pass the last pos seen to continue. Returns at
-- least p_limit rows when that many are ready, never part of a transaction.
-- Runs with the caller's rights: row-level security applies.
--
-- Why not by a sequence or by finished_at: both are drawn before commit, so
-- a transaction that commits late files rows behind what a reader already
-- passed. Transaction ids below the snapshot's xmin belong to transactions
-- that have all ended, so that part of the history can no longer change.
CREATE OR REPLACE FUNCTION pgsched.read_events(
    p_after bigint  DEFAULT 0,
    p_limit integer DEFAULT 1000
)
RETURNS TABLE (pos bigint, id bigint, queue text, task text, state pgsched.job_state,
               attempt integer, finished_at timestamptz, error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_horizon xid8 := pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
    v_top bigint := v_horizon::text::bigint;
    v_limit integer := greatest(coalesce(p_limit, 1000), 1);
    -- the window of positions read, (v_lo, v_hi): no row lies in (p_after, v_lo]
    v_lo bigint := p_after;
    v_hi bigint;
    v_step bigint := 64;
    v_mid bigint;
    v_any boolean;
    v_cut bigint;
BEGIN
    IF p_after IS NULL OR p_after < 0 THEN
        RAISE EXCEPTION 'read_events: position must be 0 or a position it returned, not %', p_after
            USING ERRCODE = '22023';
    END IF;
    -- Positions are read a window at a time (their index is BRIN,
    -- 20_indexes.sql): a reader far behind sorts one window's rows, not
    -- every row after its position. First the window skips, widening
    -- fourfold, over positions that filed nothing (a reader at 0, a quiet
    -- stream in a busy cluster) ...
    LOOP
        v_hi := CASE WHEN v_top - v_lo <= v_step THEN v_top ELSE v_lo + v_step END;
        v_any := EXISTS (SELECT FROM pgsched.job_history h
                         WHERE (h.finished_xid::text)::bigint > v_lo AND (h.finished_xid::text)::bigint < v_hi);
        EXIT WHEN v_any OR v_hi >= v_top;
        v_lo := v_hi - 1;
        v_step := v_step * 4;
    END LOOP;
    IF NOT v_any THEN
        RETURN;  -- nothing after p_after is readable yet
    END IF;
    -- ... and halves the window that has rows down to where they begin ...
    WHILE v_hi - v_lo > 64 LOOP
        v_mid := v_lo + (v_hi - v_lo) / 2;
        IF EXISTS (SELECT FROM pgsched.job_history h
                   WHERE (h.finished_xid::text)::bigint > v_lo AND (h.finished_xid::text)::bigint < v_mid) THEN
            v_hi := v_mid;
        ELSE
            v_lo := v_mid - 1;
        END IF;
    END LOOP;
    -- ... then, from there, it starts narrow again (one
    -- transaction may file a whole batch at one position) and widens until
    -- it holds v_limit rows or reaches the horizon.
    v_step := 64;
    LOOP
        v_hi := CASE WHEN v_top - v_lo <= v_step THEN v_top ELSE v_lo + v_step END;
        -- The transaction of the p_limit-th row: the batch ends with it, whole.
        SELECT t.x INTO v_cut
        FROM (SELECT (h.finished_xid::text)::bigint AS x
              FROM pgsched.job_history h
              WHERE (h.finished_xid::text)::bigint > v_lo AND (h.finished_xid::text)::bigint < v_hi) t
        ORDER BY t.x
        OFFSET v_limit - 1
        LIMIT 1;
        EXIT WHEN v_cut IS NOT NULL OR v_hi >= v_top;
        v_step := v_step * 4;
    END LOOP;
    RETURN QUERY
    SELECT h.finished_xid::text::bigint, h.id, h.queue, h.task, h.state, h.attempt, h.finished_at, h.error
    FROM pgsched.job_history h
    WHERE (h.finished_xid::text)::bigint > v_lo AND (h.finished_xid::text)::bigint < v_hi
      AND (v_cut IS NULL OR (h.finished_xid::text)::bigint <= v_cut)
    ORDER BY h.finished_xid, h.finished_at, h.id;
END
$$;

-- functions/record_step.sql
-- record_step
-- contract: records the JSON result of a finished durable step (ctx.step) of
-- a running job, fenced by its lease token like complete(): only the run
-- that holds the current lease can record a step, so a stale worker's result
-- is refused ('lease_lost') and whatever it did is done again by the run that
-- owns the job. A step already recorded under that name keeps its first
-- result ('exists'; the new one is dropped). Otherwise the step is appended
-- to jobs.steps as {name, result, at, attempt, token, worker} ('recorded'), in the
-- caller's own short transaction; when the job runs again (a retry, an
-- expired lease, a hand-back) the handler gets the recorded result instead
-- of running the step. The steps go to job_history with the job and are
-- dropped with it (history_retention). Refused with invalid_parameter_value,
-- writing nothing: a name that is empty or over 200 characters, a NULL
-- result (JSON null is fine); with program_limit_exceeded: a result larger
-- than config.max_payload_bytes, or a 1001st step.
CREATE OR REPLACE FUNCTION pgsched.record_step(
    job_id bigint,
    token  bigint,
    name   text,
    result jsonb,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_scope text := pgsched._caller_scope();
    v_limit integer;
    v_steps jsonb;
BEGIN
    IF record_step.name IS NULL OR pg_catalog.length(record_step.name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'pgsched: a step name must have 1 to 200 characters, not %', pgsched._shown(record_step.name)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'name';
    END IF;
    IF record_step.result IS NULL THEN
        RAISE EXCEPTION 'pgsched: step % has no result (JSON null is one: ''null''::jsonb)',
                pgsched._shown(record_step.name)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'result';
    END IF;
    SELECT c.max_payload_bytes INTO v_limit FROM pgsched.config c;
    IF pg_catalog.octet_length(record_step.result::text) > v_limit THEN
        RAISE EXCEPTION 'pgsched: the result of step % is % bytes: at most % (config.max_payload_bytes)',
                pgsched._shown(record_step.name), pg_catalog.octet_length(record_step.result::text), v_limit
            USING ERRCODE = 'program_limit_exceeded', COLUMN = 'result';
    END IF;

    -- One statement checks the token and writes; the row lock orders it with
    -- complete(), fail() and the next claim, and the check is made on the row
    -- version that lock returns.
    UPDATE pgsched.jobs j
    SET steps = coalesce(j.steps, '[]') || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
            'name', record_step.name, 'result', record_step.result, 'at', v_now,
            'attempt', j.attempt, 'token', j.lease_token, 'worker', j.leased_by))
    WHERE j.id = record_step.job_id AND j.lease_token = record_step.token AND j.state = 'running'
      AND (v_scope IS NULL OR j.tenant = v_scope)
      AND NOT coalesce(j.steps, '[]') @> pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('name', record_step.name))
      AND pg_catalog.jsonb_array_length(coalesce(j.steps, '[]')) < 1000;
    IF FOUND THEN
        RETURN 'recorded';
    END IF;
    -- Nothing written: say why (reads only).
    SELECT j.steps INTO v_steps
    FROM pgsched.jobs j
    WHERE j.id = record_step.job_id AND j.lease_token = record_step.token AND j.state = 'running'
      AND (v_scope IS NULL OR j.tenant = v_scope);
    IF NOT FOUND THEN
        RETURN 'lease_lost';
    ELSIF v_steps @> pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('name', record_step.name)) THEN
        RETURN 'exists';
    END IF;
    RAISE EXCEPTION 'pgsched: job % has 1000 steps already: at most 1000', record_step.job_id
        USING ERRCODE = 'program_limit_exceeded', COLUMN = 'steps';
END
$$;

-- functions/register_tasks.sql
-- register_tasks
-- contract: upserts task policies from a JSON array of objects with keys
-- name (required), queue, max_attempts, backoff_base, backoff_max,
-- backoff_jitter, timeout (seconds), labels (default labels of the task's
-- jobs) and tenant. Workers call it at start with the tasks they serve.
-- Returns the number of policies written (an unchanged one is not).
--
-- A policy belongs to a tenant or to all: a session confined to a tenant
-- (see _tenant_scope) writes that tenant's own policies only, which its
-- jobs take instead of the shared one; naming another tenant, or none, is
-- refused. The policy every tenant shares (tenant absent or null) is set
-- only by an unconfined session, which may also write one tenant's.
CREATE OR REPLACE FUNCTION pgsched.register_tasks(tasks jsonb)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
    v_scope text := pgsched._tenant_scope();
    v_other text;
BEGIN
    IF pg_catalog.jsonb_typeof(register_tasks.tasks) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'pgsched: register_tasks expects a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_scope = '' THEN
        PERFORM pgsched._check_tenant(NULL);  -- a login bound to nothing: refused, with the hint to bind it
    END IF;
    IF v_scope IS NOT NULL THEN
        SELECT coalesce(e->>'tenant', '(none: the policy every tenant shares)') INTO v_other
        FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
        WHERE e ? 'tenant' AND (e->>'tenant') IS DISTINCT FROM v_scope
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgsched: this session is confined to tenant % and registers task policies for it only, not %',
                v_scope, v_other
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Leave tenant out: the policy is this tenant''s. A shared policy needs a login not bound to a tenant.';
        END IF;
    END IF;
    INSERT INTO pgsched.tasks AS t
        (name, tenant, queue, max_attempts, backoff_base, backoff_max, backoff_jitter, updated_at, timeout, labels)
    SELECT e->>'name', coalesce(v_scope, e->>'tenant'), coalesce(e->>'queue', 'default'),
           (e->>'max_attempts')::integer,
           pg_catalog.make_interval(secs => (e->>'backoff_base')::double precision),
           pg_catalog.make_interval(secs => (e->>'backoff_max')::double precision),
           (e->>'backoff_jitter')::real, pg_catalog.now(),
           pg_catalog.make_interval(secs => (e->>'timeout')::double precision),
           CASE WHEN pg_catalog.jsonb_typeof(e->'labels') = 'array' AND e->'labels' <> '[]'
                THEN ARRAY(SELECT pg_catalog.jsonb_array_elements_text(e->'labels')) END
    FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
    ON CONFLICT (name, tenant) DO UPDATE
    SET queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts, backoff_base = EXCLUDED.backoff_base,
        backoff_max = EXCLUDED.backoff_max, backoff_jitter = EXCLUDED.backoff_jitter, updated_at = EXCLUDED.updated_at,
        timeout = EXCLUDED.timeout, labels = EXCLUDED.labels
    WHERE (t.queue, t.max_attempts, t.backoff_base, t.backoff_max, t.backoff_jitter, t.timeout, t.labels)
          IS DISTINCT FROM (EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.backoff_base,
                            EXCLUDED.backoff_max, EXCLUDED.backoff_jitter, EXCLUDED.timeout, EXCLUDED.labels);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

-- functions/register_worker.sql
-- register_worker
-- contract: records a worker as live (or refreshes it) for operators;
-- heartbeat(worker => name) keeps last_seen current and unregister_worker()
-- removes it on a clean exit. tasks: the task names it runs (NULL: not
-- reported); pass_over() and the unserved-tasks check read them. Jobs of
-- those tasks passed over while no worker knew them (unserved_since) are due
-- at once, for it. resource_limits says how a worker that runs command jobs
-- limits them ('cgroup v1 (...)', 'cgroup v2 (...)', 'rlimit (...)'; NULL: it
-- runs none), for pgsched doctor.
CREATE OR REPLACE FUNCTION pgsched.register_worker(
    name        text,
    host        text    DEFAULT NULL,
    pid         integer DEFAULT NULL,
    queues      text[]  DEFAULT '{}',
    labels      text[]  DEFAULT '{}',
    concurrency integer DEFAULT NULL,
    version     text    DEFAULT NULL,
    tasks       text[]  DEFAULT NULL,
    resource_limits text DEFAULT NULL
)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    INSERT INTO pgsched.workers AS w
        (name, host, pid, queues, labels, concurrency, version, started_at, last_seen, tasks, resource_limits)
    VALUES (register_worker.name, register_worker.host, register_worker.pid, coalesce(register_worker.queues, '{}'),
            coalesce(register_worker.labels, '{}'), register_worker.concurrency, register_worker.version,
            pg_catalog.now(), pg_catalog.now(), register_worker.tasks, register_worker.resource_limits)
    ON CONFLICT (name) DO UPDATE
    SET host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues, labels = EXCLUDED.labels,
        concurrency = EXCLUDED.concurrency, version = EXCLUDED.version, tasks = EXCLUDED.tasks,
        started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen, running = 0,
        resource_limits = EXCLUDED.resource_limits;
    UPDATE pgsched.jobs j
    SET run_at = pg_catalog.now()
    WHERE j.unserved_since IS NOT NULL AND j.state = 'scheduled' AND j.run_at > pg_catalog.now()
      AND j.task = ANY (register_worker.tasks)
      AND (j.queue = ANY (register_worker.queues) OR '*' = ANY (register_worker.queues))
      AND (pgsched._tenant_scope() IS NULL OR j.tenant = pgsched._tenant_scope())
$$;

-- functions/release.sql
-- release
-- contract: hands running jobs back at once (a worker shutting down before
-- they finished), each under its fencing token, without counting a failure.
-- Returns one row per job with its new state or 'lease_lost'. Jobs are
-- visited in id order.
--
-- ran (one per job; NULL: true): false says the job's handler never ran here
-- although its start is recorded (a claim records the start of the jobs it
-- expects to take a slot within moments: claim(..., starts)); that start is
-- withdrawn first, so the hand-back counts as one before the handler started
-- (not against config.max_handbacks).
-- The signature before ran is replaced, not overloaded.
DROP FUNCTION IF EXISTS pgsched.release(bigint[], bigint[], timestamptz);
CREATE OR REPLACE FUNCTION pgsched.release(
    job_ids bigint[],
    tokens  bigint[],
    p_now   timestamptz DEFAULT NULL,
    ran     boolean[]   DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    -- the clock now, not at transaction start: a lease that ran out is not handed back (_put_back)
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_scope text := pgsched._caller_scope();
BEGIN
    IF release.ran IS NOT NULL AND false = ANY (release.ran) THEN
        UPDATE pgsched.jobs j
        SET started_at = NULL, deadline_at = NULL
        FROM unnest(release.job_ids, release.tokens, release.ran) AS u(id, token, ran)
        WHERE u.ran IS FALSE AND j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
          AND j.started_at IS NOT NULL
          AND (v_scope IS NULL OR j.tenant = v_scope);  -- tokens are guessable, tenants are not
    END IF;
    RETURN QUERY
    SELECT u.id, pgsched._put_back(u.id, u.token, NULL, 'released', v_now)
    FROM unnest(release.job_ids, release.tokens) AS u(id, token)
    ORDER BY u.id;
END
$$;

-- functions/release_shards.sql
-- release_shards
-- contract: a scanner shutting down gives its shards back at once (so others
-- need not wait for the lease to lapse) and leaves the scanner registry.
-- Returns how many shards it released.
CREATE OR REPLACE FUNCTION pgsched.release_shards(scanner text)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    UPDATE pgsched.shard_leases l
    SET owner = NULL, expires_at = NULL, renewed_at = pg_catalog.now()
    WHERE l.owner = release_shards.scanner;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    DELETE FROM pgsched.scanners s WHERE s.name = release_shards.scanner;
    RETURN v_count;
END
$$;

-- functions/rotate_ready.sql
-- rotate_ready
-- contract: turns the ring of pgsched.ready (10_tables.sql) and empties its
-- drained slots, so that claims read the dead entries of the last second or
-- two only, however long something pins the xmin horizon. Returns what it
-- did: one row per slot it opened ('opened'), emptied ('emptied', rows moved
-- to the open slot in moved) or had to leave ('busy': a lock it could not
-- take at once; 'kept': more than p_move due jobs still in it).
--   - The open slot has been open p_period: the next slot of the ring that is
--     empty opens (none empty: the open one stays open).
--   - A closed slot that holds pages is emptied (at once when none of its
--     jobs is still due, else once it was closed p_period ago): under
--     an ACCESS EXCLUSIVE lock taken within lock_timeout (claims wait for it
--     a few milliseconds at most; held: tried again at the next call), its
--     due jobs that are still there (at most p_move: the tail of a backlog,
--     a paused queue, labels no worker offers) move to the open slot, rows whose job
--     is no longer due are dropped, and TRUNCATE gives its files back whole:
--     no vacuum, and no xmin horizon, is needed for that.
-- First, if a crash or a promotion emptied the ring (its slots are
-- unlogged), it is filled again from pgsched.jobs (_rebuild_ready).
-- Callers at the same time do not wait for each other: the one that gets the
-- ring's advisory lock works, the others return nothing. Workers and
-- scanners call it every second (pgsched/runtime/vacuumer.py).
CREATE OR REPLACE FUNCTION pgsched.rotate_ready(
    p_period interval DEFAULT interval '1 second',
    p_move   integer  DEFAULT 1000
)
RETURNS TABLE (slot smallint, action text, moved bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
SET lock_timeout = '20ms'
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_open pgsched.ready_ring;
    v_next smallint;
    v_slot smallint;
    v_rel regclass;
    v_live bigint;
    v_moved bigint;
    v_settled boolean;
BEGIN
    IF p_period IS NULL OR p_period <= interval '0' OR p_move IS NULL OR p_move < 0 THEN
        RAISE EXCEPTION 'pgsched: rotate_ready needs p_period > 0 and p_move >= 0 (got %, %)', p_period, p_move
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- After a crash or a promotion emptied the unlogged ring, fill it again
    -- (workers call this every second, whether or not they claim).
    IF NOT EXISTS (SELECT FROM pgsched.ready_intact) THEN
        PERFORM pgsched._rebuild_ready();
    END IF;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgsched.ready_ring')) THEN
        RETURN;
    END IF;
    -- The ring's rows emptied by hand (every slot closed, or none there): slot 0, where rows then go, is open.
    INSERT INTO pgsched.ready_ring AS g (slot, opened_at, closed_at)
    SELECT s, v_now, v_now FROM pg_catalog.generate_series(0, 7) s
    ON CONFLICT (slot) DO NOTHING;
    SELECT * INTO v_open FROM pgsched.ready_ring g WHERE g.closed_at IS NULL;
    IF NOT FOUND THEN
        UPDATE pgsched.ready_ring g SET opened_at = v_now, closed_at = NULL WHERE g.slot = 0
        RETURNING * INTO v_open;
    END IF;

    -- Empty the closed slots, oldest first: at once when all their jobs
    -- were claimed (their dead entries are what every claim steps over
    -- while the horizon is held), and those that still hold due jobs once
    -- they were closed p_period ago (by then moving them is worth it).
    FOR v_slot, v_settled IN
        SELECT g.slot, g.closed_at <= v_now - p_period FROM pgsched.ready_ring g
        WHERE g.closed_at IS NOT NULL
          AND pg_catalog.pg_relation_size(pg_catalog.format('pgsched.ready_s%s', g.slot)::regclass) > 0
        ORDER BY g.closed_at
    LOOP
        v_rel := pg_catalog.format('pgsched.ready_s%s', v_slot)::regclass;
        -- Counted before the lock too: a slot kept for its backlog costs no lock.
        EXECUTE pg_catalog.format('SELECT pg_catalog.count(*) FROM (SELECT FROM %s LIMIT %s) x', v_rel, p_move + 1)
            INTO v_live;
        IF v_live > 0 AND NOT v_settled THEN
            CONTINUE;
        END IF;
        IF v_live > p_move THEN
            RETURN QUERY SELECT v_slot, 'kept'::text, v_live;
            CONTINUE;
        END IF;
        BEGIN
            EXECUTE pg_catalog.format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_rel);
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT v_slot, 'busy'::text, NULL::bigint;
            CONTINUE;
        END;
        EXECUTE pg_catalog.format('SELECT pg_catalog.count(*) FROM (SELECT FROM %s LIMIT %s) x', v_rel, p_move + 1)
            INTO v_live;
        IF v_live > 0 AND NOT v_settled THEN
            CONTINUE;
        END IF;
        IF v_live > p_move THEN
            RETURN QUERY SELECT v_slot, 'kept'::text, v_live;
            CONTINUE;
        END IF;
        v_moved := 0;
        IF v_live > 0 THEN
            -- Still due and still where the row says: into the open slot.
            EXECUTE pg_catalog.format($sql$
                WITH moved AS (
                    INSERT INTO pgsched.ready
                        (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels, tenant,
                         concurrency_key)
                    SELECT $1, r.queue, r.dispatch_group, r.dispatch_rank, r.dispatch_at, r.id, r.shard, r.priority,
                           r.labels, r.tenant, r.concurrency_key
                    FROM %s r
                    JOIN pgsched.jobs j ON j.id = r.id AND j.shard = r.shard
                    WHERE j.state = 'available' AND j.queue = r.queue AND j.dispatch_group = r.dispatch_group
                      AND j.dispatch_rank = r.dispatch_rank AND j.dispatch_at = r.dispatch_at
                    RETURNING 1
                )
                SELECT pg_catalog.count(*) FROM moved
            $sql$, v_rel) INTO v_moved USING v_open.slot;
        END IF;
        EXECUTE pg_catalog.format('TRUNCATE %s', v_rel);
        RETURN QUERY SELECT v_slot, 'emptied'::text, v_moved;
    END LOOP;

    -- Open the next empty slot once the open one has had its turn.
    IF v_open.opened_at <= v_now - p_period THEN
        SELECT g.slot INTO v_next FROM pgsched.ready_ring g
        WHERE g.slot <> v_open.slot
          AND pg_catalog.pg_relation_size(pg_catalog.format('pgsched.ready_s%s', g.slot)::regclass) = 0
        ORDER BY (g.slot - v_open.slot + 8) % 8
        LIMIT 1;
        IF v_next IS NOT NULL THEN
            UPDATE pgsched.ready_ring g SET closed_at = v_now WHERE g.slot = v_open.slot;
            UPDATE pgsched.ready_ring g SET opened_at = v_now, closed_at = NULL WHERE g.slot = v_next;
            RETURN QUERY SELECT v_next, 'opened'::text, NULL::bigint;
        END IF;
    END IF;
END
$$;

-- functions/remove_schedule.sql
-- remove_schedule
-- contract: deletes a schedule and withdraws its occurrences that have not
-- started (queued ones leave without running; running ones finish). Returns
-- how many occurrences were withdrawn, or NULL when no such schedule exists
-- (also for another tenant's schedule when the session is confined to one).
CREATE OR REPLACE FUNCTION pgsched.remove_schedule(name text, p_now timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_count integer;
BEGIN
    DELETE FROM pgsched.schedules s WHERE s.name = remove_schedule.name AND pgsched._tenant_visible(s.tenant);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_count := pgsched._withdraw(remove_schedule.name, '-infinity', v_now, 'schedule removed');
    RETURN v_count;
END
$$;

-- functions/report_progress.sql
-- report_progress
-- contract: records how far the handlers of these running jobs are
-- (ctx.progress: a fraction from 0 to 1 and an optional note), in one
-- statement for all of a worker's reports, fenced by each job's lease token
-- like heartbeat(): only a job still running under that token is written, so
-- a stale worker cannot move a job another worker now runs. Returns one row
-- per input job: whether the report was kept. The job's row keeps the last
-- report (progress, progress_note, progress_at: the database's clock) and
-- its history row takes it along when the job ends. Workers send at most one
-- such statement a second (docs/steps.md, "Progress"), whatever the
-- handlers' rate. A fraction outside 0..1 (or NaN), a note over 1000
-- characters, or arrays of different lengths are refused with
-- invalid_parameter_value and nothing is written. Rows another statement has
-- locked right now (a completion, a heartbeat) are skipped, as in heartbeat():
-- the next report carries the newer value anyway.
CREATE OR REPLACE FUNCTION pgsched.report_progress(
    job_ids   bigint[],
    tokens    bigint[],
    fractions real[],
    notes     text[]      DEFAULT NULL,
    p_now     timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, kept boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
SET enable_seqscan = off  -- (see heartbeat())
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_scope text := pgsched._caller_scope();
    v_n integer := coalesce(pg_catalog.cardinality(report_progress.job_ids), 0);
BEGIN
    IF coalesce(pg_catalog.cardinality(report_progress.tokens), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(report_progress.fractions), 0) <> v_n
       OR (report_progress.notes IS NOT NULL AND pg_catalog.cardinality(report_progress.notes) <> v_n) THEN
        RAISE EXCEPTION 'pgsched: job_ids, tokens, fractions and notes must have the same length'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(report_progress.fractions) f
               WHERE f IS NULL OR f OPERATOR(pg_catalog.<) 0 OR f OPERATOR(pg_catalog.>) 1
                  OR f OPERATOR(pg_catalog.=) 'NaN'::real) THEN
        RAISE EXCEPTION 'pgsched: a progress fraction must be from 0 to 1'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'progress';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(report_progress.notes) n WHERE pg_catalog.length(n) > 1000) THEN
        RAISE EXCEPTION 'pgsched: a progress note must be at most 1000 characters'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'progress_note';
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token, u.fraction, u.note
        FROM unnest(report_progress.job_ids, report_progress.tokens, report_progress.fractions,
                    coalesce(report_progress.notes, pg_catalog.array_fill(NULL::text, ARRAY[v_n])))
             AS u(id, token, fraction, note)
    ), locked AS MATERIALIZED (
        SELECT j.id, u.fraction, u.note
        FROM pgsched.jobs j
        JOIN input u ON j.id = u.id AND j.lease_token = u.token
        -- The ids as an index condition (see heartbeat()). A current token
        -- is a running job's (jobs_state_valid), so no filter on state: with
        -- one, the plan may read the running rows' partial index whole.
        WHERE j.id = ANY (report_progress.job_ids) AND (v_scope IS NULL OR j.tenant = v_scope)
        FOR UPDATE OF j SKIP LOCKED
    ), reported AS (
        -- each locked job's report, by id, read once per row below
        SELECT pg_catalog.jsonb_object_agg(l.id::text, pg_catalog.jsonb_build_array(l.fraction, l.note)) AS by_id
        FROM locked l
    ), written AS (
        -- The locked rows by their ids alone, as heartbeat() finds them (no per-row shard join).
        UPDATE pgsched.jobs j
        SET progress = ((SELECT r.by_id FROM reported r) -> (j.id::text) ->> 0)::real,
            progress_note = (SELECT r.by_id FROM reported r) -> (j.id::text) ->> 1,
            progress_at = v_now
        WHERE j.id = ANY (ARRAY(SELECT k.id FROM locked k))
        RETURNING j.id
    )
    SELECT u.id, w.id IS NOT NULL
    FROM input u
    LEFT JOIN written w ON w.id = u.id;
END
$$;

-- functions/resume_queue.sql
-- resume_queue
-- contract: lets workers claim from a paused queue again and wakes them.
-- Returns whether the queue had been paused. Refused for a session confined
-- to a tenant.
CREATE OR REPLACE FUNCTION pgsched.resume_queue(queue text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_unconfined('resume a queue (queues are shared by every tenant)');
    UPDATE pgsched.queues q SET paused = false, updated_at = pg_catalog.now()
    WHERE q.name = resume_queue.queue AND q.paused;
    IF FOUND THEN
        PERFORM pg_catalog.pg_notify('pgsched_jobs', resume_queue.queue);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- functions/resume_schedule.sql
-- resume_schedule
-- contract: lets a paused schedule fire again from now on; the occurrences
-- that fell in the pause are not misfires, they are simply not run. Returns
-- whether the schedule exists (for a session confined to a tenant: one of
-- its tenant).
CREATE OR REPLACE FUNCTION pgsched.resume_schedule(name text, p_now timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
BEGIN
    UPDATE pgsched.schedules s
    SET enabled = true, expanded_until = v_now
    WHERE s.name = resume_schedule.name AND NOT s.enabled AND pgsched._tenant_visible(s.tenant);
    RETURN FOUND OR EXISTS (SELECT 1 FROM pgsched.schedules s
                            WHERE s.name = resume_schedule.name AND pgsched._tenant_visible(s.tenant));
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
-- tenant when the session is confined to one, see _check_tenant). It keeps
-- its own run limit (job_history.timeout); a command job gets its deadline
-- again as enqueue_command sets it: its args' timeout_s + the current
-- config.command_timeout_margin.
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
         concurrency_key, memory_limit, cpu_limit, timeout)
    VALUES (v_last.id, v_last.shard, v_last.queue, v_last.task, v_last.args, v_last.priority, v_now,
            v_last.idempotency_key, v_last.labels, v_last.tenant, v_last.created_at, v_last.service,
            v_last.concurrency_key, v_last.memory_limit, v_last.cpu_limit,
            CASE WHEN v_last.task = 'pgsched.command' AND pg_catalog.jsonb_typeof(v_last.args -> 'timeout_s') = 'number'
                      AND (v_last.args ->> 'timeout_s')::double precision > 0
                 THEN pg_catalog.make_interval(secs => (v_last.args ->> 'timeout_s')::double precision)
                      + (SELECT c.command_timeout_margin FROM pgsched.config c)
                 ELSE v_last.timeout END)
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

-- functions/retry_many.sql
-- retry_many
-- contract: pgsched.retry for each of p_ids, in one statement and one
-- transaction, in id order (so two bulk calls never deadlock), each id once;
-- returns (job_id, result) with retry()'s answer per job. It runs with the
-- caller's rights and goes through retry() itself, so every rule of a single
-- retry (tenant confinement, one redrive at a time) holds for each job. At most
-- 10000 ids per call.
CREATE OR REPLACE FUNCTION pgsched.retry_many(
    p_ids bigint[],
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, result text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    -- Refused at once for a moved clock, even when there is no job to pass it to.
    PERFORM pgsched._clock(p_now);
    IF pg_catalog.cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'pgsched: retry_many takes at most 10000 jobs per call, not %',
            pg_catalog.cardinality(p_ids)
            USING ERRCODE = 'program_limit_exceeded', HINT = 'Call it once per slice of the ids.';
    END IF;
    FOR job_id IN SELECT DISTINCT u.id FROM pg_catalog.unnest(p_ids) AS u(id) WHERE u.id IS NOT NULL ORDER BY u.id
    LOOP
        result := pgsched.retry(job_id, p_now);
        RETURN NEXT;
    END LOOP;
END
$$;

-- functions/rollup_queue_history.sql
-- rollup_queue_history
-- contract: files finished work into pgsched.queue_minutes, one row per
-- (UTC minute, queue): completed, dead, cancelled (from job_history by
-- finished_at), failed runs sent back for a retry, redrives and expired
-- leases (from job_events), start-lag and run-time percentiles of the jobs
-- finished in the minute, and, for the minute p_now falls in, the queue's
-- depth sampled now. Rolls every minute from the last final one (rolled at
-- least 10 s after it ended; at most a day back, or from p_since) up to the
-- minute of p_until (default: now). Idempotent: an upsert keyed by (minute,
-- queue) computed from the source rows, so rolling a minute twice, or from
-- two processes, gives the same counts; a closed minute keeps the depth
-- sampled while it was open. Callers take turns on a transaction-scoped
-- advisory lock (a busy one is skipped), and a default call within 10 s of
-- the last one is skipped too, so scanners and workers can all call it.
CREATE OR REPLACE FUNCTION pgsched.rollup_queue_history(
    p_until timestamptz DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL,
    p_since timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_current timestamptz := pg_catalog.date_trunc('minute', v_now, 'UTC');
    v_to timestamptz := pg_catalog.date_trunc('minute', least(coalesce(p_until, v_now), v_now), 'UTC')
                        + interval '1 minute';
    v_from timestamptz;
    v_rows integer;
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgsched.rollup_queue_history')) THEN
        RETURN pg_catalog.jsonb_build_object('skipped', 'another rollup is running');
    END IF;
    IF p_until IS NULL AND p_since IS NULL AND EXISTS (
        SELECT 1 FROM pgsched.queue_minutes m
        WHERE m.minute = v_current AND m.rolled_at > v_now - interval '10 seconds' AND m.rolled_at <= v_now) THEN
        RETURN pg_catalog.jsonb_build_object('skipped', 'rolled up less than 10 s ago');
    END IF;
    v_from := coalesce(
        pg_catalog.date_trunc('minute', p_since, 'UTC'),
        (SELECT pg_catalog.max(m.minute) + interval '1 minute' FROM pgsched.queue_minutes m
         WHERE m.minute >= v_to - interval '1 day' AND m.minute < v_to
           AND m.rolled_at >= m.minute + interval '70 seconds'),
        v_to - interval '1 day');

    WITH finished AS (
        -- Percentiles of date_part (a float8) rather than EXTRACT (a numeric):
        -- sorting a minute of 600,000 jobs takes about half as long.
        SELECT pg_catalog.date_trunc('minute', h.finished_at, 'UTC') AS minute, h.queue,
               pg_catalog.count(*) FILTER (WHERE h.state = 'completed') AS completed,
               pg_catalog.count(*) FILTER (WHERE h.state = 'dead') AS dead,
               pg_catalog.count(*) FILTER (WHERE h.state = 'cancelled') AS cancelled,
               pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
                   ORDER BY pg_catalog.date_part('epoch', h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
                   AS lag,
               pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
                   ORDER BY pg_catalog.date_part('epoch', h.finished_at - h.started_at)) FILTER (WHERE h.started_at IS NOT NULL)
                   AS run
        FROM pgsched.job_history h
        WHERE h.finished_at >= v_from AND h.finished_at < v_to
        GROUP BY 1, 2
    ), events AS (
        SELECT pg_catalog.date_trunc('minute', e.at, 'UTC') AS minute, q.queue,
               pg_catalog.count(*) FILTER (WHERE e.kind = 'failed') AS failed,
               pg_catalog.count(*) FILTER (WHERE e.kind = 'retried') AS retried,
               pg_catalog.count(*) FILTER (WHERE e.kind = 'lease_expired') AS expired
        FROM pgsched.job_events e
        -- Events do not carry the queue; the job's row does, active or finished.
        CROSS JOIN LATERAL (
            SELECT coalesce(
                (SELECT j.queue FROM pgsched.jobs j WHERE j.id = e.job_id LIMIT 1),
                (SELECT h.queue FROM pgsched.job_history h WHERE h.id = e.job_id LIMIT 1)) AS queue
        ) q
        WHERE e.at >= v_from AND e.at < v_to AND e.kind IN ('failed', 'retried', 'lease_expired')
          AND q.queue IS NOT NULL
        GROUP BY 1, 2
    ), depth AS (
        SELECT v_current AS minute, j.queue,
               pg_catalog.count(*) FILTER (WHERE j.state = 'available') AS available,
               pg_catalog.count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
               pg_catalog.count(*) FILTER (WHERE j.state = 'running') AS running,
               EXTRACT(EPOCH FROM v_now - pg_catalog.min(j.run_at) FILTER (
                   WHERE j.state = 'available' OR (j.state = 'scheduled' AND j.run_at <= v_now)))::double precision
                   AS oldest_due_age_s
        FROM pgsched.jobs j
        WHERE v_current >= v_from AND v_current < v_to
        GROUP BY j.queue
    ), keys AS (
        SELECT f.minute, f.queue FROM finished f
        UNION SELECT e.minute, e.queue FROM events e
        UNION SELECT d.minute, d.queue FROM depth d
        -- Rows already there are rolled again too (and so become final).
        UNION SELECT m.minute, m.queue FROM pgsched.queue_minutes m WHERE m.minute >= v_from AND m.minute < v_to
    ), upserted AS (
        INSERT INTO pgsched.queue_minutes AS m
            (minute, queue, completed, failed, dead, cancelled, retried, expired,
             available, scheduled, running, oldest_due_age_s,
             lag_p50_s, lag_p95_s, lag_p99_s, run_p50_s, run_p95_s, run_p99_s, rolled_at)
        SELECT k.minute, k.queue, coalesce(f.completed, 0), coalesce(e.failed, 0), coalesce(f.dead, 0),
               coalesce(f.cancelled, 0), coalesce(e.retried, 0), coalesce(e.expired, 0),
               -- The minute being sampled: a queue without active jobs has depth 0.
               CASE WHEN k.minute = v_current THEN coalesce(d.available, 0) END,
               CASE WHEN k.minute = v_current THEN coalesce(d.scheduled, 0) END,
               CASE WHEN k.minute = v_current THEN coalesce(d.running, 0) END,
               CASE WHEN k.minute = v_current THEN coalesce(d.oldest_due_age_s, 0) END,
               f.lag[1], f.lag[2], f.lag[3], f.run[1], f.run[2], f.run[3], v_now
        FROM keys k
        LEFT JOIN finished f ON f.minute = k.minute AND f.queue = k.queue
        LEFT JOIN events e ON e.minute = k.minute AND e.queue = k.queue
        LEFT JOIN depth d ON d.minute = k.minute AND d.queue = k.queue
        ORDER BY k.minute, k.queue
        ON CONFLICT (minute, queue) DO UPDATE
        SET completed = excluded.completed, failed = excluded.failed, dead = excluded.dead,
            cancelled = excluded.cancelled, retried = excluded.retried, expired = excluded.expired,
            available = CASE WHEN excluded.minute = v_current THEN excluded.available ELSE m.available END,
            scheduled = CASE WHEN excluded.minute = v_current THEN excluded.scheduled ELSE m.scheduled END,
            running = CASE WHEN excluded.minute = v_current THEN excluded.running ELSE m.running END,
            oldest_due_age_s = CASE WHEN excluded.minute = v_current THEN excluded.oldest_due_age_s
                                    ELSE m.oldest_due_age_s END,
            lag_p50_s = excluded.lag_p50_s, lag_p95_s = excluded.lag_p95_s, lag_p99_s = excluded.lag_p99_s,
            run_p50_s = excluded.run_p50_s, run_p95_s = excluded.run_p95_s, run_p99_s = excluded.run_p99_s,
            rolled_at = greatest(m.rolled_at, excluded.rolled_at)
        RETURNING 1
    )
    SELECT pg_catalog.count(*) INTO v_rows FROM upserted;
    RETURN pg_catalog.jsonb_build_object('from', v_from, 'until', v_to, 'rows', v_rows);
END
$$;

-- functions/scan_shard.sql
-- scan_shard
-- contract: one scanner pass over one shard it holds (fenced by owner and
-- epoch, see _hold_shard): expires dead workers' leases, promotes due jobs
-- (waking workers), and says when the shard's next scheduled job is due so the
-- scanner can sleep until exactly then: an occurrence still waiting after
-- promotion (for the previous run of its schedule) is looked at again a
-- second later. Raises PS409 when the lease is gone.
CREATE OR REPLACE FUNCTION pgsched.scan_shard(
    scanner text,
    shard   integer,
    epoch   bigint,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (expired integer, promoted integer, next_due timestamptz, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_expired integer;
    v_promoted integer;
    v_next timestamptz;
BEGIN
    PERFORM pgsched._hold_shard(scan_shard.scanner, scan_shard.shard, scan_shard.epoch, v_now);
    -- p_now itself (checked above; NULL means the same transaction clock).
    v_expired := pgsched.expire_leases(scan_shard.p_now, 1000, scan_shard.shard);
    v_promoted := pgsched.promote_due(scan_shard.p_now, 10000, scan_shard.shard);
    v_next := pgsched.next_due(scan_shard.shard);
    IF v_promoted < 10000 AND v_next <= v_now THEN
        v_next := v_now + interval '1 second';
    END IF;
    RETURN QUERY SELECT v_expired, v_promoted, v_next, pg_catalog.clock_timestamp();
END
$$;

-- functions/schedule_error.sql
-- schedule_error
-- contract: records that a schedule cannot be expanded (a cron expression
-- that does not parse or never fires) so operators see why, and marks this
-- version handled so scanners do not retry it in a loop. Fenced by the
-- scanner's lease like every scanner write.
CREATE OR REPLACE FUNCTION pgsched.schedule_error(
    scanner  text,
    shard    integer,
    epoch    bigint,
    schedule text,
    version  integer,
    error    text,
    p_now    timestamptz DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pgsched._hold_shard(schedule_error.scanner, schedule_error.shard, schedule_error.epoch,
                                coalesce(pgsched._clock(p_now), pg_catalog.now()));
    UPDATE pgsched.schedules s
    SET last_error = schedule_error.error, expanded_version = s.version
    WHERE s.name = schedule_error.schedule AND s.version = schedule_error.version;
END
$$;

-- functions/schema_revision.sql
-- schema_revision
-- contract: the migration revision of this pgsched schema (NULL for an
-- install made from sql/ without the migration tool), readable by every
-- pgsched role so workers can check they match the database before they run.
CREATE OR REPLACE FUNCTION pgsched.schema_revision()
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_revision text;
BEGIN
    IF pg_catalog.to_regclass('pgsched.alembic_version') IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE 'SELECT version_num FROM pgsched.alembic_version LIMIT 1' INTO v_revision;
    RETURN v_revision;
END
$$;

-- functions/snooze.sql
-- snooze
-- contract: puts a running job back to run at run_at, under its fencing
-- token, without counting a failed attempt. Returns 'scheduled' or
-- 'available', 'cancelled' if cancellation had been requested, or
-- 'lease_lost' for a stale token.
CREATE OR REPLACE FUNCTION pgsched.snooze(
    job_id bigint,
    token  bigint,
    run_at timestamptz,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    RETURN pgsched._put_back(snooze.job_id, snooze.token, snooze.run_at, 'snoozed',
                             coalesce(pgsched._clock(snooze.p_now), pg_catalog.clock_timestamp()));
END
$$;

-- functions/tg_config__before_update.sql
-- tg_config__before_update
-- contract: the shard count is fixed at install (the partitions of
-- pgsched.jobs and the shard leases were made for it): an UPDATE that
-- changes it is refused, for every role. The other settings are kept valid
-- by the table's CHECK constraints.
CREATE OR REPLACE FUNCTION pgsched.tg_config__before_update()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF NEW.shards IS DISTINCT FROM OLD.shards OR NEW.singleton IS DISTINCT FROM OLD.singleton THEN
        RAISE EXCEPTION 'pgsched: the shard count is fixed at install (% shards)', OLD.shards
            USING ERRCODE = 'feature_not_supported', SCHEMA = 'pgsched', TABLE = 'config', COLUMN = 'shards',
                  HINT = 'Install into a new database with pgsched migrate --shards N and move the jobs.';
    END IF;
    RETURN NEW;
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
-- 'lease_lost' (another run may own it, or its lease ran out: do not start
-- it; claim() already counts a run-out lease's slot free). A job claimed but
-- not started has started_at NULL, so views tell "waiting for a slot" from
-- "running", and start lag (started_at - run_at) counts the wait for a slot.
-- A started job carries its deadline: deadline_at = started_at + its timeout
-- (the job's, else its task's in pgsched.tasks, its tenant's own first), returned as `timeout` so the
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
-- Primary-key probes whatever the statistics say (see complete()).
SET enable_seqscan = off
-- One generic plan for every call, whatever the batch's size (see complete()).
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_shard smallint;
    v_ids bigint[];
    v_tokens bigint[];
BEGIN
    -- One statement per shard of the batch, in that shard's partition only,
    -- as in complete(); a job given without its shard gets it by id.
    FOR v_shard, v_ids, v_tokens IN
        SELECT s.shard, pg_catalog.array_agg(s.id), pg_catalog.array_agg(s.token)
        FROM (
            SELECT u.id, u.token,
                   coalesce(u.shard, (SELECT f.shard FROM pgsched.jobs f WHERE f.id = u.id LIMIT 1)) AS shard
            FROM unnest(start.job_ids, start.tokens, start.shards) AS u(id, token, shard)
            WHERE u.id IS NOT NULL
        ) s
        GROUP BY s.shard
        ORDER BY s.shard
    LOOP
        RETURN QUERY
        WITH input AS (
            SELECT u.id, u.token FROM unnest(v_ids, v_tokens) AS u(id, token)
        ), stamped AS (
            UPDATE pgsched.jobs j
            SET started_at = CASE WHEN j.cancel_requested_at IS NULL THEN v_now ELSE j.started_at END,
                unserved_since = NULL,  -- a worker that knows its task runs it
                deadline_at = CASE WHEN j.cancel_requested_at IS NULL
                    THEN v_now + coalesce(j.timeout, (SELECT t.timeout FROM pgsched.tasks t
                                                      WHERE t.name = j.task AND (t.tenant IS NULL OR t.tenant = j.tenant)
                                                      ORDER BY t.tenant NULLS LAST LIMIT 1))
                    ELSE j.deadline_at END
            -- the ids are the index condition (one probe each); a current
            -- token is a running job's (jobs_state_valid), so no filter on
            -- state, and no partial index of running rows to scan. Each id
            -- with its own token, looked up in one hash of the batch: a join
            -- here would be planned for the ten rows a generic plan guesses,
            -- and pass over the batch once per job
            WHERE j.shard = v_shard AND j.id = ANY (v_ids)
              AND ((j.id, j.lease_token) IN (SELECT u.id, u.token FROM input u)) IS TRUE
              AND j.lease_expires_at > v_now
            RETURNING j.id, j.cancel_requested_at IS NULL AS go, j.deadline_at - j.started_at AS timeout
        )
        SELECT u.id, CASE WHEN s.go THEN 'started' WHEN NOT s.go THEN 'cancel_requested' ELSE 'lease_lost' END,
               CASE WHEN s.go THEN s.timeout END
        FROM input u
        LEFT JOIN stamped s ON s.id = u.id;
    END LOOP;
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
        -- A session confined to a tenant inserts into it unless it names one.
        IF NEW.tenant IS NULL THEN
            NEW.tenant := nullif(pgsched._tenant_scope(), '');
        END IF;
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
    IF NEW.timeout IS NOT NULL OR NEW.concurrency_key IS NOT NULL THEN
        PERFORM pgsched._check_run_options(NEW.timeout, NEW.concurrency_key);
    END IF;
    PERFORM pgsched._check_payload(NEW.args, v_limit);
    IF NEW.trace_context IS NOT NULL THEN
        PERFORM pgsched._check_trace_context(NEW.trace_context);
    END IF;

    IF NEW.max_attempts IS NULL THEN
        SELECT t.max_attempts INTO NEW.max_attempts FROM pgsched.tasks t
        WHERE t.name = NEW.task AND (t.tenant IS NULL OR t.tenant = NEW.tenant)
        ORDER BY t.tenant NULLS LAST LIMIT 1;
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

-- functions/tg_jobs__dispatch.sql
-- tg_jobs__dispatch
-- contract: stamps a job's place in the claim order from its queue's policy
-- whenever the row is written or its run_at, priority, queue or tenant
-- changes (never by a sweep of waiting rows): dispatch_at = run_at under
-- strict priority (dispatch_rank = -priority), or run_at - priority x aging
-- under aging (dispatch_rank = 0), so a job due at run_at with priority p
-- passes a job of priority q due (q - p) x aging later: one priority step per
-- aging interval waited, fixed once, read by one index scan; never earlier
-- than now - 1,000,000 x aging (the priority cap). Under tenant
-- fairness dispatch_group is '*' and run_at gives way to a virtual time
-- (_fair_stamp: the tenants' weighted shares), so the claim's index scan
-- serves tenants in proportion to their weights with no per-tenant reads. A new job without labels gets its task's
-- default labels, else its queue's (worker pools, docs/dispatch.md).
-- enqueue() and enqueue_many() stamp the same values in their INSERT, so
-- their rows skip it (30_triggers.sql); a change here must be made there.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__dispatch()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_aging interval;
    v_fair boolean;
    v_weights jsonb;
    v_labels text[];
    v_task_labels text[];
BEGIN
    SELECT q.aging, q.tenant_fairness, q.labels, q.tenant_weights INTO v_aging, v_fair, v_labels, v_weights
    FROM pgsched.queues q WHERE q.name = NEW.queue;
    IF TG_OP = 'INSERT' AND NEW.labels = '{}' THEN
        SELECT t.labels INTO v_task_labels FROM pgsched.tasks t
        WHERE t.name = NEW.task AND (t.tenant IS NULL OR t.tenant = NEW.tenant)
        ORDER BY t.tenant NULLS LAST LIMIT 1;
        NEW.labels := coalesce(v_task_labels, v_labels, '{}');
    END IF;
    NEW.dispatch_group := CASE WHEN v_fair THEN '*' ELSE '' END;
    IF v_fair THEN
        -- A place in the tenants' shared line (virtual time), then priority as below.
        NEW.dispatch_rank := CASE WHEN v_aging IS NULL THEN -NEW.priority ELSE 0 END;
        NEW.dispatch_at := pgsched._fair_stamp(NEW.queue, NEW.tenant, v_weights, NEW.run_at, v_aging)
                           - coalesce(NEW.priority * v_aging, interval '0');
    ELSIF v_aging IS NULL THEN
        NEW.dispatch_rank := -NEW.priority;
        NEW.dispatch_at := NEW.run_at;
    ELSE
        -- |priority| <= 1e6 and aging <= 1 day: at most 2738 years either way.
        -- Aged at most to the priority cap: a run_at backdated by years ranks
        -- with a fresh job of priority 1,000,000, never before it.
        NEW.dispatch_rank := 0;
        NEW.dispatch_at := GREATEST(NEW.run_at - NEW.priority * v_aging, pg_catalog.now() - 1000000 * v_aging);
    END IF;
    RETURN NEW;
END
$$;

-- functions/_ready_slot.sql
-- _ready_slot
-- contract: the slot of pgsched.ready that takes new rows: the open one of
-- pgsched.ready_ring; with no slot open (the ring emptied by hand), slot 0
-- (rotate_ready opens one again).
-- PL/pgSQL, so its plan is made once per session: a SQL function whose body
-- holds a subquery is never inlined, and PostgreSQL planned it again at each
-- statement that called it (about 40 us per single enqueue). Every name is
-- qualified, so it needs no SET clause.
CREATE OR REPLACE FUNCTION pgsched._ready_slot()
RETURNS smallint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN coalesce((SELECT g.slot FROM pgsched.ready_ring g WHERE g.closed_at IS NULL), 0::smallint);
END
$$;

-- functions/_rebuild_ready.sql
-- _rebuild_ready
-- contract: fills pgsched.ready again from pgsched.jobs after a crash or a
-- standby's promotion emptied its unlogged slots (pgsched.ready_intact
-- empty): every available job without its row gets one in the open slot,
-- the ring is marked intact, and each queue that got rows is announced on
-- pgsched_jobs so idle workers claim them. One caller at a time (the others
-- wait, then find the ring intact); returns the rows added, NULL when the
-- ring was intact. Rows of jobs made available meanwhile by their own
-- statements are not added twice; a claim ignores a stale row anyway.
CREATE OR REPLACE FUNCTION pgsched._rebuild_ready()
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
-- claim() and rotate_ready() run under short lock timeouts: the first
-- caller may take as long as the backlog needs, the others wait for it.
SET lock_timeout = 0
AS $$
DECLARE
    v_slot smallint;
    v_added bigint;
    v_queues text[];
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgsched.ready_intact'));
    IF EXISTS (SELECT FROM pgsched.ready_intact) THEN
        RETURN NULL;
    END IF;
    v_slot := pgsched._ready_slot();
    WITH added AS (
        INSERT INTO pgsched.ready
            (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels, tenant,
             concurrency_key)
        SELECT v_slot, j.queue, j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id, j.shard, j.priority,
               j.labels, j.tenant, j.concurrency_key
        FROM pgsched.jobs j
        WHERE j.state = 'available'
          AND NOT EXISTS (SELECT FROM pgsched.ready r WHERE r.id = j.id AND r.shard = j.shard)
        RETURNING queue
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT a.queue) INTO v_added, v_queues
    FROM added a;
    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    INSERT INTO pgsched.ready_intact DEFAULT VALUES;
    RAISE LOG 'pgsched: the ring of due jobs was empty after a restart or promotion; % rows added from pgsched.jobs',
        v_added;
    RETURN v_added;
END
$$;

-- functions/tg_jobs__ready_rows.sql
-- tg_jobs__ready_rows
-- contract: after each INSERT statement into pgsched.jobs, the due jobs it
-- wrote (state 'available') enter pgsched.ready, in the open slot of the
-- ring: one INSERT for the whole statement, whoever wrote the rows (the
-- enqueue functions, retry, the scanners' occurrences, a plain INSERT). Rows
-- that are not due enter pgsched.ready when they become due
-- (tg_jobs__ready_row).
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__ready_rows()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_slot smallint := pgsched._ready_slot();  -- once for the statement's rows
BEGIN
    INSERT INTO pgsched.ready
        (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels, tenant, concurrency_key)
    SELECT v_slot,
           n.queue, n.dispatch_group, n.dispatch_rank, n.dispatch_at, n.id, n.shard, n.priority, n.labels, n.tenant,
           n.concurrency_key
    FROM new_jobs n
    WHERE n.state = 'available';
    RETURN NULL;
END
$$;

-- functions/tg_jobs__ready_row.sql
-- tg_jobs__ready_row
-- contract: keeps pgsched.ready one row per due job when a job of
-- pgsched.jobs becomes due, stops being due other than by a claim, or
-- changes its place in the claim order (queue, dispatch stamps, labels,
-- tenant, key) while due: the old row leaves, found by its claim-order key,
-- and the new one enters the open slot. Claims remove their jobs' rows
-- themselves, and the trigger's WHEN (30_triggers.sql) leaves every other
-- update (heartbeats, starts, completions' deletes) alone.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__ready_row()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF OLD.state = 'available' THEN
        DELETE FROM pgsched.ready r
        WHERE r.queue = OLD.queue AND r.dispatch_group = OLD.dispatch_group AND r.dispatch_rank = OLD.dispatch_rank
          AND r.dispatch_at = OLD.dispatch_at AND r.id = OLD.id;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.state = 'available' THEN
        INSERT INTO pgsched.ready
            (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels, tenant,
             concurrency_key)
        VALUES (pgsched._ready_slot(),
                NEW.queue, NEW.dispatch_group, NEW.dispatch_rank, NEW.dispatch_at, NEW.id, NEW.shard, NEW.priority,
                NEW.labels, NEW.tenant, NEW.concurrency_key);
    END IF;
    RETURN NULL;
END
$$;

-- functions/tg_jobs__ready_truncate.sql
-- tg_jobs__ready_truncate
-- contract: after TRUNCATE of pgsched.jobs, pgsched.ready is emptied too
-- (its rows would name jobs that are gone). When the same statement
-- truncates pgsched.ready as well (pgsched.testing's clean names every
-- table), it cannot be truncated again from here: its rows, if any are
-- left, are deleted.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__ready_truncate()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    BEGIN
        TRUNCATE pgsched.ready;
    EXCEPTION WHEN object_in_use THEN
        DELETE FROM pgsched.ready;
    END;
    RETURN NULL;
END
$$;

-- functions/tg_schedules__before_write.sql
-- tg_schedules__before_write
-- contract: a schedule lives on the shard of its name; any change to what a
-- schedule fires (cron, zone, task, args, queue, policies, enabled...) bumps
-- its version, so the next scan withdraws the occurrences expanded under the
-- old version and expands the new one. Works for plain INSERT/UPDATE too,
-- which are refused what upsert_schedule refuses (_check_schedule,
-- _check_schedule_names; and the command task, _check_command_task)
-- (SECURITY DEFINER: pgsched_admin writes the table but not the helpers).
CREATE OR REPLACE FUNCTION pgsched.tg_schedules__before_write()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_command_task(NEW.task, 'a schedule');
    IF TG_OP = 'INSERT' OR (NEW.name, NEW.task, NEW.timezone) IS DISTINCT FROM (OLD.name, OLD.task, OLD.timezone) THEN
        PERFORM pgsched._check_schedule_names(NEW.name, NEW.task, NEW.timezone);
    END IF;
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

-- functions/unbind_tenant.sql
-- unbind_tenant
-- contract: removes the tenant binding of the login role `role`. It stays a
-- member of pgsched_tenant_scoped, so it is then confined to nothing (fails
-- closed) until it is bound again or that role is revoked from it. Only a
-- session that is not confined itself may unbind.
-- Returns the tenant it was bound to, or NULL.
CREATE OR REPLACE FUNCTION pgsched.unbind_tenant(role regrole)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_previous text;
BEGIN
    PERFORM pgsched._check_unconfined('unbind tenants');
    DELETE FROM pgsched.tenant_roles b WHERE b.role = unbind_tenant.role RETURNING b.tenant INTO v_previous;
    RETURN v_previous;
END
$$;

-- functions/unregister_worker.sql
-- unregister_worker
-- contract: forgets a worker that exits cleanly.
CREATE OR REPLACE FUNCTION pgsched.unregister_worker(name text)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    DELETE FROM pgsched.workers w WHERE w.name = unregister_worker.name
$$;

-- functions/upsert_schedule.sql
-- upsert_schedule
-- contract: creates the schedule `name`, or updates it when it exists (an
-- update that changes what it fires takes effect at the next scan: future
-- occurrences expanded under the old definition are withdrawn and replaced).
-- Returns the schedule's version afterwards. Refuses (with the reason) a
-- schedule that could never be expanded: see _check_schedule. A session
-- confined to a tenant writes only schedules of its tenant; a worker login
-- (without pgsched_admin) only schedules defined in code (see
-- _check_schedule_write).
CREATE OR REPLACE FUNCTION pgsched.upsert_schedule(
    name           text,
    cron           text,
    task           text,
    args           jsonb    DEFAULT '{}',
    timezone       text     DEFAULT 'UTC',
    queue          text     DEFAULT 'default',
    priority       integer  DEFAULT 0,
    max_attempts   integer  DEFAULT NULL,
    gap_policy     text     DEFAULT 'run',
    overlap_policy text     DEFAULT 'once',
    misfire_policy text     DEFAULT 'latest',
    misfire_cap    integer  DEFAULT 100,
    misfire_grace  interval DEFAULT '1 minute',
    concurrency    text     DEFAULT 'skip',
    enabled        boolean  DEFAULT true,
    horizon        interval DEFAULT '1 hour',
    labels         text[]   DEFAULT '{}',
    tenant         text     DEFAULT NULL,
    source         text     DEFAULT 'sql'
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT pgsched._check_schedule_write(upsert_schedule.name, upsert_schedule.tenant,
                                         coalesce(upsert_schedule.source, 'sql'));
    SELECT pgsched._check_schedule(upsert_schedule.cron, upsert_schedule.priority, upsert_schedule.max_attempts,
                                   upsert_schedule.labels, upsert_schedule.tenant, upsert_schedule.args);
    INSERT INTO pgsched.schedules AS s
        (name, cron, task, args, timezone, queue, priority, max_attempts, gap_policy, overlap_policy,
         misfire_policy, misfire_cap, misfire_grace, concurrency, enabled, horizon, labels, tenant, source, shard)
    VALUES (upsert_schedule.name, upsert_schedule.cron, upsert_schedule.task, coalesce(upsert_schedule.args, '{}'),
            coalesce(upsert_schedule.timezone, 'UTC'), coalesce(upsert_schedule.queue, 'default'),
            coalesce(upsert_schedule.priority, 0), upsert_schedule.max_attempts,
            coalesce(upsert_schedule.gap_policy, 'run'), coalesce(upsert_schedule.overlap_policy, 'once'),
            coalesce(upsert_schedule.misfire_policy, 'latest'), coalesce(upsert_schedule.misfire_cap, 100),
            coalesce(upsert_schedule.misfire_grace, interval '1 minute'),
            coalesce(upsert_schedule.concurrency, 'skip'), coalesce(upsert_schedule.enabled, true),
            coalesce(upsert_schedule.horizon, interval '1 hour'), coalesce(upsert_schedule.labels, '{}'),
            upsert_schedule.tenant, coalesce(upsert_schedule.source, 'sql'), 0)
    ON CONFLICT (name) DO UPDATE
    SET cron = EXCLUDED.cron, task = EXCLUDED.task, args = EXCLUDED.args, timezone = EXCLUDED.timezone,
        queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
        gap_policy = EXCLUDED.gap_policy, overlap_policy = EXCLUDED.overlap_policy,
        misfire_policy = EXCLUDED.misfire_policy, misfire_cap = EXCLUDED.misfire_cap,
        misfire_grace = EXCLUDED.misfire_grace,
        concurrency = EXCLUDED.concurrency, enabled = EXCLUDED.enabled, horizon = EXCLUDED.horizon,
        labels = EXCLUDED.labels, tenant = EXCLUDED.tenant, source = EXCLUDED.source
    WHERE pgsched._tenant_visible(s.tenant)
    RETURNING s.version
$$;

-- functions/vacuum_candidates.sql
-- vacuum_candidates
-- contract: the partitions of pgsched.jobs that the caller may vacuum or
-- analyze (a member of the owner role, or, on PostgreSQL 17 and later, one
-- holding MAINTAIN), and that need it now, most dead rows first:
--   vacuum  at least p_min_dead dead row versions, and at least p_ratio times
--           as many dead as live (the statistics' counts). Every job leaves
--           two behind (claimed, then finished), and autovacuum visits a
--           database once per autovacuum_naptime (a minute) at best: a busy
--           queue piles up hundreds of thousands in between, and claims wade
--           through them.
--   analyze the planner's row count (pg_class.reltuples) is off from the live
--           rows by more than 1,000 and by more than half. Cached plans of
--           claim, heartbeat and complete are built for the table's size
--           when first used; built on an empty table, they scan it, and stay
--           until the next ANALYZE: a burst of 400,000 jobs then makes each
--           claim take 170 ms instead of 0.5 ms. ANALYZE replaces them.
--           Or the partition has grown past twice the pages the planner
--           last recorded (pg_class.relpages), and by more than 32: under a
--           pinned xmin horizon the live rows stay few while dead ones fill
--           the pages, no vacuum runs (nothing to remove) and so nothing
--           replans; plans made while the partition was a page or two (a
--           hash join over sequential scans) read every dead row at each
--           start() and complete(). Replanned for its size, each job is a
--           primary-key probe.
-- Workers and scanners run VACUUM / ANALYZE (SKIP_LOCKED) on what this names
-- every few seconds (pgsched/vacuumer.py).
CREATE OR REPLACE FUNCTION pgsched.vacuum_candidates(
    p_min_dead bigint           DEFAULT 10000,
    p_ratio    double precision DEFAULT 0.2
)
RETURNS TABLE (schema_name text, table_name text, dead bigint, live bigint, needs_vacuum boolean, needs_analyze boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_maintain boolean := pg_catalog.current_setting('server_version_num')::integer >= 170000;
BEGIN
    IF p_min_dead IS NULL OR p_min_dead < 0 OR p_ratio IS NULL OR p_ratio < 0 THEN
        RAISE EXCEPTION 'pgsched: vacuum_candidates needs p_min_dead >= 0 and p_ratio >= 0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    SELECT t.schema_name, t.table_name, t.dead, t.live, t.needs_vacuum, t.needs_analyze
    FROM (
        SELECT n.nspname::text AS schema_name, c.relname::text AS table_name,
               s.n_dead_tup AS dead, s.n_live_tup AS live,
               s.n_dead_tup >= p_min_dead AND s.n_dead_tup >= p_ratio * s.n_live_tup AS needs_vacuum,
               pg_catalog.abs(s.n_live_tup - greatest(c.reltuples, 0))
                   > greatest(1000, 0.5 * greatest(c.reltuples, 0))
               OR pg_catalog.pg_relation_size(c.oid)
                   / pg_catalog.current_setting('block_size')::bigint > 2 * c.relpages + 32 AS needs_analyze
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_catalog.pg_stat_all_tables s ON s.relid = c.oid
        WHERE i.inhparent = 'pgsched.jobs'::pg_catalog.regclass
          AND (pg_catalog.pg_has_role(c.relowner, 'USAGE')
               OR CASE WHEN v_maintain THEN pg_catalog.has_table_privilege(c.oid, 'MAINTAIN') ELSE false END)
    ) t
    WHERE t.needs_vacuum OR t.needs_analyze
    ORDER BY t.dead DESC;
END
$$;

-- functions/xmin_horizon.sql
-- xmin_horizon
-- contract: what holds back the xmin horizon, oldest first: each session
-- whose transaction holds a snapshot (backend_xmin) or an xid of its own
-- (backend_xid: a transaction that wrote, even idle between statements with
-- no snapshot), each prepared transaction, and each replication slot with an
-- xmin. Sessions and prepared transactions of other databases are left out:
-- they do not hold back this database's tables (PostgreSQL 14 and later). VACUUM keeps every row version that died after the oldest of these
-- began, so while one stays, dead rows in pgsched.jobs pile up and nothing
-- removes them. xid_age is in transactions (age()); age_s is how long the
-- holder's transaction has been open (NULL for a slot). Invoker's rights:
-- a role without pg_read_all_stats (pg_monitor) sees only the sessions of
-- its own roles, as in pg_stat_activity. Used by `pgsched doctor`, the
-- database metrics and the workers' vacuum thread (which stops vacuuming a
-- partition again while the same holder keeps the horizon where it was).
CREATE OR REPLACE FUNCTION pgsched.xmin_horizon()
RETURNS TABLE (holder text, pid integer, horizon xid, xid_age integer, age_s double precision,
               state text, application_name text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT h.holder, h.pid, h.horizon, pg_catalog.age(h.horizon), h.age_s, h.state, h.application_name
    FROM (
        -- Of a session's xid and snapshot xmin, the older (age: xids wrap around).
        SELECT 'session' AS holder, a.pid,
               CASE WHEN a.backend_xmin IS NULL
                         OR pg_catalog.age(a.backend_xid) OPERATOR(pg_catalog.>) pg_catalog.age(a.backend_xmin)
                    THEN coalesce(a.backend_xid, a.backend_xmin) ELSE a.backend_xmin END AS horizon,
               pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) a.xact_start) AS age_s,
               a.state, a.application_name
        FROM pg_catalog.pg_stat_activity a
        WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
          AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
          -- NULL: a process of no database (a walsender with hot_standby_feedback)
          AND (a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database() OR a.datid IS NULL)
          -- a lazy VACUUM holds back no one's horizon
          AND a.backend_type OPERATOR(pg_catalog.<>) 'autovacuum worker'
        UNION ALL
        SELECT 'prepared transaction ' OPERATOR(pg_catalog.||) p.gid, NULL, p.transaction,
               pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) p.prepared), NULL, NULL
        FROM pg_catalog.pg_prepared_xacts p
        WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
        UNION ALL
        -- catalog_xmin holds back the system catalogs only, not pgsched's tables
        SELECT 'replication slot ' OPERATOR(pg_catalog.||) s.slot_name, s.active_pid, s.xmin, NULL,
               CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL
        FROM pg_catalog.pg_replication_slots s
        WHERE s.xmin IS NOT NULL
    ) h
    ORDER BY pg_catalog.age(h.horizon) DESC, h.age_s DESC NULLS LAST
$$;

-- 30_triggers.sql
-- pgsched: triggers. CREATE OR REPLACE, so a migration can apply this file whole.
--
-- Every row entering pgsched.jobs passes tg_jobs__before_insert, except rows
-- written by the owner's enqueue functions (enqueue, enqueue_many,
-- enqueue_service, enqueue_command), which do the same work themselves and
-- name the attempt column (0). The mark is in the row, not in the session:
-- attempt has no default and no other role may name it (90_grants.sql), so a
-- row of any other writer, and a row of another owner function (retry, the
-- scanners' add_occurrences), arrives with attempt NULL and passes the
-- trigger, whatever the caller has SET.
-- Writers other than the owner (plain INSERTs by applications) pass the
-- 'untrusted' trigger, which also assigns id, shard and created_at and
-- refuses a schedule link; CURRENT_USER in WHEN is the writer's role, before
-- the SECURITY DEFINER function switches to the owner.
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
            WHEN (CURRENT_USER = %L AND NEW.attempt IS NULL)
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('owner')
        $sql$, current_user);
END
$$;

CREATE OR REPLACE TRIGGER tg_schedules__before_write
    BEFORE INSERT OR UPDATE ON pgsched.schedules
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_schedules__before_write();

CREATE OR REPLACE TRIGGER tg_config__before_update
    BEFORE UPDATE ON pgsched.config
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_config__before_update();

-- After the insert triggers (names fire in order): the claim order of a row
-- from its queue's dispatch policy. A row the schema's owner writes with its
-- dispatch_* columns already stamped (enqueue() and enqueue_many() compute
-- them in their INSERT, as this trigger would) skips it; the columns have no
-- default, so any other row of the owner's arrives with dispatch_at NULL and
-- is stamped here, and a row of any other writer always is, whatever its
-- INSERT said. UPDATE OF: claims, heartbeats and completions, which set none
-- of these columns, never fire the update trigger.
DO $$
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__dispatch
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER <> %L OR NEW.dispatch_at IS NULL)
            EXECUTE FUNCTION pgsched.tg_jobs__dispatch()
        $sql$, current_user);
END
$$;
CREATE OR REPLACE TRIGGER tg_jobs__redispatch
    BEFORE UPDATE OF run_at, priority, queue, tenant ON pgsched.jobs
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_jobs__dispatch();

-- pgsched.ready, the due jobs claims read (10_tables.sql), follows the jobs:
-- the due rows of each INSERT statement at once, then each job that becomes
-- due, stops being due or moves in the claim order while due. The claim's
-- own transition (available to running) is not one of them: claims remove
-- their jobs' rows in the statement that leases them. Heartbeats, starts and
-- completions (running rows) fail the WHEN and cost nothing more.
CREATE OR REPLACE TRIGGER tg_jobs__ready_rows
    AFTER INSERT ON pgsched.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.tg_jobs__ready_rows();
CREATE OR REPLACE TRIGGER tg_jobs__ready_row
    AFTER UPDATE ON pgsched.jobs
    FOR EACH ROW
    WHEN ((OLD.state = 'available' OR NEW.state = 'available') AND NEW.state <> 'running'
          AND (OLD.state <> NEW.state
               OR (OLD.queue, OLD.dispatch_group, OLD.dispatch_rank, OLD.dispatch_at, OLD.priority, OLD.labels,
                   OLD.tenant, OLD.concurrency_key)
                  IS DISTINCT FROM (NEW.queue, NEW.dispatch_group, NEW.dispatch_rank, NEW.dispatch_at, NEW.priority,
                                    NEW.labels, NEW.tenant, NEW.concurrency_key)))
    EXECUTE FUNCTION pgsched.tg_jobs__ready_row();
CREATE OR REPLACE TRIGGER tg_jobs__ready_gone
    AFTER DELETE ON pgsched.jobs
    FOR EACH ROW
    WHEN (OLD.state = 'available')
    EXECUTE FUNCTION pgsched.tg_jobs__ready_row();
-- TRUNCATE of pgsched.jobs (tests, benchmarks, a reset by hand) empties the
-- due rows with it: no row trigger sees it.
CREATE OR REPLACE TRIGGER tg_jobs__ready_truncate
    AFTER TRUNCATE ON pgsched.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.tg_jobs__ready_truncate();

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
    -- (date_part, a float8, sorts in about half the time of EXTRACT's numeric)
    SELECT h.queue,
           pg_catalog.count(*) FILTER (WHERE h.state = 'completed') AS completed_5m,
           pg_catalog.count(*) FILTER (WHERE h.state = 'dead') AS dead_5m,
           pg_catalog.count(*) FILTER (WHERE h.state = 'cancelled') AS cancelled_5m,
           pg_catalog.percentile_cont(0.5) WITHIN GROUP (
               ORDER BY pg_catalog.date_part('epoch', h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p50,
           pg_catalog.percentile_cont(0.95) WITHIN GROUP (
               ORDER BY pg_catalog.date_part('epoch', h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p95,
           pg_catalog.percentile_cont(0.99) WITHIN GROUP (
               ORDER BY pg_catalog.date_part('epoch', h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
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
-- jobs whose handler runs, and jobs claimed that wait for a slot; the tasks
-- it runs (NULL: not reported). The running jobs are counted per worker in
-- one pass over their index (jobs_running_queue_idx); a query that reads
-- neither count does not read them at all (the join is removed).
CREATE OR REPLACE VIEW pgsched.workers_live AS
SELECT w.name, w.host, w.pid, w.queues, w.labels, w.concurrency, w.started_at, w.last_seen,
       EXTRACT(EPOCH FROM pg_catalog.now() - w.last_seen)::double precision AS seen_s_ago,
       coalesce(h.running, 0) AS running, w.version, coalesce(h.claimed, 0) AS claimed,
       w.tasks
FROM pgsched.workers w
LEFT JOIN (
    SELECT j.leased_by,
           pg_catalog.count(*) FILTER (WHERE j.started_at IS NOT NULL) AS running,
           pg_catalog.count(*) FILTER (WHERE j.started_at IS NULL) AS claimed
    FROM pgsched.jobs j
    WHERE j.state = 'running'
    GROUP BY j.leased_by
) h ON h.leased_by = w.name
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

-- job_timeline: every transition of every job, in order: those recorded in
-- job_events (failures, retries, snoozes, expiries, cancels, hand-backs, and
-- the claim of every attempt that did not complete) and those derived from
-- the job's own row: the claim of the attempt running now (jobs.claimed_at)
-- and the claim and completion of a completed job's last attempt
-- (job_history.claimed_at, finished_at), and each durable step's finish
-- (kind 'step', detail {name}; jobs.steps or job_history.steps). source says which; seq is the
-- event's for a recorded one. Rows filed before job_history had claimed_at
-- kept recorded claimed/completed events and are not derived again.
-- security_invoker: the reader's row-level security applies, as on the
-- tables (a tenant-bound session sees its own jobs' derived transitions;
-- events carry no tenant, so it sees no recorded ones).
CREATE OR REPLACE VIEW pgsched.job_timeline WITH (security_invoker = true) AS
SELECT t.job_id, t.at, t.kind, t.attempt, t.worker, t.token, t.detail, t.source, t.seq
FROM (
    SELECT e.job_id, e.at, e.kind, e.attempt, e.worker, e.token, e.detail, 'recorded'::text AS source, e.seq,
           CASE e.kind WHEN 'claimed' THEN 0 ELSE 1 END AS step
    FROM pgsched.job_events e
    UNION ALL
    SELECT j.id, j.claimed_at, 'claimed', j.attempt, j.leased_by, j.lease_token, NULL, 'derived', NULL, 0
    FROM pgsched.jobs j
    WHERE j.state = 'running' AND j.claimed_at IS NOT NULL
      -- a claim recorded before events became exceptions
      AND NOT EXISTS (SELECT 1 FROM pgsched.job_events e
                      WHERE e.job_id = j.id AND e.kind = 'claimed' AND e.token = j.lease_token)
    UNION ALL
    SELECT h.id, d.at, d.kind, h.attempt, h.leased_by, h.lease_token, NULL, 'derived', NULL, d.step
    FROM pgsched.job_history h
    CROSS JOIN LATERAL (VALUES (h.claimed_at, 'claimed', 0), (h.finished_at, 'completed', 2)) AS d(at, kind, step)
    WHERE h.state = 'completed' AND h.claimed_at IS NOT NULL
    UNION ALL
    -- durable steps (docs/steps.md), of an active or a finished job: name only, never the result
    SELECT s.id, (e.step ->> 'at')::timestamptz, 'step', (e.step ->> 'attempt')::integer, e.step ->> 'worker',
           (e.step ->> 'token')::bigint, pg_catalog.jsonb_build_object('name', e.step -> 'name'), 'derived', NULL, 1
    FROM (SELECT j.id, j.steps FROM pgsched.jobs j WHERE j.steps IS NOT NULL
          UNION ALL
          SELECT h.id, h.steps FROM pgsched.job_history h WHERE h.steps IS NOT NULL) s
    CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(s.steps) AS e(step)
) t
ORDER BY t.job_id, t.at, t.attempt, t.step, t.seq;
COMMENT ON VIEW pgsched.job_timeline IS
    'Every transition of a job in order: recorded (job_events: the exceptions) and derived (jobs/job_history: the claim of a running attempt, the claim and completion of a completed job). Obeys the reader''s row-level security.';

-- 90_grants.sql
-- pgsched: privileges and row-level security (DESIGN §5).
--
--   pgsched_enqueue  enqueue (functions or INSERT INTO pgsched.jobs) and read jobs
--   pgsched_worker   claim, heartbeat, complete, fail, snooze, release, housekeeping;
--                    reads everything, writes nothing directly
--   pgsched_admin    both of the above, plus cancel, retry, queue pause/resume, config
--   pgsched_command  enqueue command jobs (enqueue_command): programs that --commands
--                    workers run; no other role can enqueue one (docs/security.md)
--   pgsched_tenant_scoped  a marker: members are confined to the tenant their
--                    login is bound to (bind_tenant); unbound, to nothing
--
-- Tenants are bound to login roles (pgsched.tenant_roles) and decided from
-- session_user (see _tenant_scope), so SET ROLE and SET pgsched.tenant move
-- no bound or scoped session. Only the owner can move a function's clock
-- (_clock).
--
-- Applications connect as roles granted these, never as the owner. Every
-- function that writes runs as SECURITY DEFINER with a fixed search_path.

REVOKE ALL ON SCHEMA pgsched FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA pgsched FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgsched FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgsched FROM PUBLIC;
GRANT USAGE ON SCHEMA pgsched TO pgsched_enqueue, pgsched_worker, pgsched_admin, pgsched_command;

GRANT pgsched_enqueue, pgsched_worker TO pgsched_admin;

-- The clock check, called by invoker-rights functions too (it only refuses).
GRANT EXECUTE ON FUNCTION pgsched._clock(timestamptz), pgsched._check_clock(timestamptz)
    TO pgsched_enqueue, pgsched_worker, pgsched_admin;
-- Used by the row-level security policies, so callable by whoever reads.
GRANT EXECUTE ON FUNCTION pgsched._tenant_visible(text), pgsched._tenant_scope()
    TO pgsched_enqueue, pgsched_worker, pgsched_admin;

GRANT EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many, pgsched.enqueue_service, pgsched.schema_revision
    TO pgsched_enqueue;
GRANT EXECUTE ON FUNCTION pgsched.read_events TO pgsched_enqueue, pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.find_jobs TO pgsched_enqueue, pgsched_worker;
-- A job wherever it is; confines tenants itself (SECURITY DEFINER).
GRANT EXECUTE ON FUNCTION pgsched.job TO pgsched_enqueue, pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.dependency_outcomes TO pgsched_enqueue, pgsched_worker;
-- Only the columns a user chooses: id, shard, created_at, state, leases and
-- schedule links come from the database (a named one is permission denied).
GRANT INSERT (queue, task, args, run_at, priority, idempotency_key, max_attempts, labels, tenant, timeout, service,
              trace_context, concurrency_key)
    ON pgsched.jobs TO pgsched_enqueue;
GRANT USAGE ON SEQUENCE pgsched.jobs_id_seq TO pgsched_enqueue;
-- The shard column's default (a plain INSERT's jobs get their shard as enqueue()'s do).
GRANT EXECUTE ON FUNCTION pgsched._home_shard(integer) TO pgsched_enqueue;
GRANT SELECT ON pgsched.jobs, pgsched.job_history, pgsched.queues, pgsched.queue_stats, pgsched.dead_letters,
    pgsched.ready
    TO pgsched_enqueue;

GRANT EXECUTE ON FUNCTION
    pgsched.claim, pgsched.heartbeat, pgsched.complete, pgsched.fail, pgsched.snooze, pgsched.release,
    pgsched.pass_over,
    pgsched.expire_leases, pgsched.promote_due, pgsched.next_due, pgsched.maintain,
    pgsched.register_tasks, pgsched.register_worker, pgsched.unregister_worker, pgsched.schema_revision,
    pgsched.acquire_shards, pgsched.release_shards, pgsched.scan_shard, pgsched.add_occurrences,
    pgsched.schedule_error, pgsched.vacuum_candidates, pgsched.acquire_idle_shards,
    pgsched.rollup_queue_history, pgsched.rotate_ready,
    -- code-defined schedules (@app.cron) only: see _check_schedule_write
    pgsched.upsert_schedule
    TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.start, pgsched.cancels_requested, pgsched.next_start TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.report_progress, pgsched.record_step TO pgsched_worker;
-- Who holds back vacuum (doctor, metrics, the vacuum thread): what pg_stat_activity shows the caller.
GRANT EXECUTE ON FUNCTION pgsched.xmin_horizon TO pgsched_enqueue, pgsched_worker, pgsched_admin;
GRANT SELECT ON pgsched.jobs, pgsched.job_history, pgsched.job_events, pgsched.config, pgsched.tasks,
    pgsched.queues, pgsched.workers, pgsched.idempotency_keys,
    pgsched.queue_stats, pgsched.dead_letters, pgsched.workers_live,
    pgsched.schedules, pgsched.schedule_occurrences, pgsched.scanners, pgsched.shard_leases,
    pgsched.schedule_status, pgsched.queue_minutes, pgsched.queue_history, pgsched.job_dependencies,
    pgsched.job_timeline, pgsched.ready
    TO pgsched_worker;

GRANT EXECUTE ON FUNCTION pgsched.cancel, pgsched.retry, pgsched.cancel_many, pgsched.retry_many,
    pgsched.pause_queue, pgsched.resume_queue, pgsched.configure_queue,
    pgsched.upsert_schedule, pgsched.remove_schedule, pgsched.pause_schedule, pgsched.resume_schedule,
    pgsched.bind_tenant, pgsched.unbind_tenant
    TO pgsched_admin;
GRANT SELECT ON pgsched.tenant_roles TO pgsched_admin;

GRANT INSERT, UPDATE, DELETE ON pgsched.schedules TO pgsched_admin;
-- The table's CHECK constraints run with the writer's rights.
GRANT EXECUTE ON FUNCTION pgsched._valid_timezone(text) TO pgsched_admin;
GRANT UPDATE ON pgsched.config TO pgsched_admin;
GRANT INSERT, UPDATE, DELETE ON pgsched.tasks, pgsched.queues TO pgsched_admin;

-- Command jobs run programs on --commands workers: their own grant, held by
-- no other pgsched role (pgsched_admin included).
GRANT EXECUTE ON FUNCTION pgsched.enqueue_command, pgsched.schema_revision TO pgsched_command;

-- Views run with the caller's rights, so row-level security applies through them.
ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);
ALTER VIEW pgsched.queue_history SET (security_invoker = true);

-- Row-level security. A policy computes the session's scope once per
-- statement (the sub-selects are InitPlans); NULL means not confined. The
-- owner's SECURITY DEFINER functions bypass it and confine tenants themselves.
ALTER TABLE pgsched.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_tenant ON pgsched.jobs
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()))
    WITH CHECK ((SELECT pgsched._tenant_scope()) IS NULL
                OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
ALTER TABLE pgsched.ready ENABLE ROW LEVEL SECURITY;
CREATE POLICY ready_tenant ON pgsched.ready
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
ALTER TABLE pgsched.job_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_history_tenant ON pgsched.job_history
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
-- Events carry no tenant: a confined session sees none.
ALTER TABLE pgsched.job_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_events_unscoped ON pgsched.job_events
    USING ((SELECT pgsched._tenant_scope()) IS NULL);
ALTER TABLE pgsched.idempotency_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY idempotency_keys_tenant ON pgsched.idempotency_keys
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
ALTER TABLE pgsched.schedules ENABLE ROW LEVEL SECURITY;
CREATE POLICY schedules_tenant ON pgsched.schedules
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()))
    WITH CHECK ((SELECT pgsched._tenant_scope()) IS NULL
                OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
ALTER TABLE pgsched.schedule_occurrences ENABLE ROW LEVEL SECURITY;
CREATE POLICY schedule_occurrences_unscoped ON pgsched.schedule_occurrences
    USING ((SELECT pgsched._tenant_scope()) IS NULL);
-- Shared by every tenant: readable by all who may read, written only by
-- sessions that are not confined.
DO $$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['config', 'queues'] LOOP
        EXECUTE pg_catalog.format('ALTER TABLE pgsched.%I ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE pg_catalog.format(
            'CREATE POLICY %I ON pgsched.%I USING (true) WITH CHECK ((SELECT pgsched._tenant_scope()) IS NULL)',
            v_table || '_shared', v_table);
        EXECUTE pg_catalog.format(
            'CREATE POLICY %I ON pgsched.%I AS RESTRICTIVE FOR DELETE USING ((SELECT pgsched._tenant_scope()) IS NULL)',
            v_table || '_shared_delete', v_table);
    END LOOP;
END
$$;
-- Task policies: the shared ones (tenant NULL) and a confined session's own
-- tenant's are readable to it; only unconfined sessions write the table
-- directly (register_tasks writes a confined session's own policies).
ALTER TABLE pgsched.tasks ENABLE ROW LEVEL SECURITY;
CREATE POLICY tasks_tenant ON pgsched.tasks
    USING ((SELECT pgsched._tenant_scope()) IS NULL OR tenant IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()))
    WITH CHECK ((SELECT pgsched._tenant_scope()) IS NULL);
CREATE POLICY tasks_tenant_delete ON pgsched.tasks AS RESTRICTIVE FOR DELETE
    USING ((SELECT pgsched._tenant_scope()) IS NULL);
-- The rollup sums every tenant's work: only unconfined roles read it.
ALTER TABLE pgsched.queue_minutes ENABLE ROW LEVEL SECURITY;
CREATE POLICY queue_minutes_unscoped ON pgsched.queue_minutes
    USING ((SELECT pgsched._tenant_scope()) IS NULL);
-- Dependency rows carry no tenant: a confined session sees none.
ALTER TABLE pgsched.job_dependencies ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_dependencies_unscoped ON pgsched.job_dependencies
    USING ((SELECT pgsched._tenant_scope()) IS NULL);

-- 99_bootstrap.sql
-- pgsched: creates what depends on the install-time shard count, the default
-- partitions that catch any row whose day partition is missing, and today's
-- day partitions.
DO $$
DECLARE
    v_shards integer;
BEGIN
    SELECT c.shards INTO v_shards FROM pgsched.config c;
    FOR s IN 0 .. v_shards - 1 LOOP
        -- fillfactor 45 leaves room on each page for the claim's new
        -- version of every row on it: an update within its page logs only
        -- the bytes that changed and no lock record (about 70 bytes of WAL
        -- a job less than at 80), and heartbeats stay HOT. The hot
        -- partitions are vacuumed early and without throttling.
        EXECUTE pg_catalog.format(
            'CREATE TABLE pgsched.%I PARTITION OF pgsched.jobs FOR VALUES IN (%s) '
            'WITH (fillfactor = 45, autovacuum_vacuum_scale_factor = 0.02, '
            'autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0)',
            'jobs_s' || s, s);
        -- Workers and scanners vacuum the hot partitions themselves (see
        -- vacuum_candidates); PostgreSQL 17 lets the owner say so.
        IF pg_catalog.current_setting('server_version_num')::integer >= 170000 THEN
            EXECUTE pg_catalog.format('GRANT MAINTAIN ON pgsched.%I TO pgsched_worker', 'jobs_s' || s);
        END IF;
    END LOOP;
    EXECUTE pg_catalog.format(
        'ALTER TABLE pgsched.jobs ALTER COLUMN shard SET DEFAULT pgsched._home_shard(%s)',
        v_shards);
    EXECUTE pg_catalog.format(
        'ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_shard_range CHECK (shard >= 0 AND shard < %s)', v_shards);
    INSERT INTO pgsched.shard_leases (shard) SELECT pg_catalog.generate_series(0, v_shards - 1);
END
$$;

-- The ring of pgsched.ready: eight unlogged slots (10_tables.sql), slot 0
-- open. Each is emptied by TRUNCATE once its jobs are claimed
-- (rotate_ready); autovacuum still visits a slot that a long backlog keeps
-- from being emptied.
DO $$
BEGIN
    FOR s IN 0 .. 7 LOOP
        EXECUTE pg_catalog.format(
            'CREATE UNLOGGED TABLE pgsched.%I PARTITION OF pgsched.ready FOR VALUES IN (%s)',
            'ready_s' || s, s);
    END LOOP;
    INSERT INTO pgsched.ready_intact DEFAULT VALUES;
    INSERT INTO pgsched.ready_ring (slot, opened_at, closed_at)
    SELECT s, CASE WHEN s = 0 THEN pg_catalog.now() END, CASE WHEN s <> 0 THEN pg_catalog.now() END
    FROM pg_catalog.generate_series(0, 7) s;
END
$$;

CREATE TABLE pgsched.job_history_default PARTITION OF pgsched.job_history DEFAULT;
CREATE TABLE pgsched.job_events_default PARTITION OF pgsched.job_events DEFAULT;
CREATE TABLE pgsched.queue_minutes_default PARTITION OF pgsched.queue_minutes DEFAULT;

SELECT pgsched.maintain();
