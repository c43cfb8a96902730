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
