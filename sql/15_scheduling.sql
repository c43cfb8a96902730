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
