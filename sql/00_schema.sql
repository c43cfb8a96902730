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
