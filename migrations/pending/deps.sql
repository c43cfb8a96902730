-- deps: job dependencies (enqueue depends_on, state 'waiting', pgsched.job_dependencies).

-- == Before the functions: signatures, type, tables, indexes. ==

-- enqueue and enqueue_many gain depends_on and on_dependency_failure.
DROP FUNCTION pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text);
DROP FUNCTION pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[]);

-- The new state. A value added in a transaction cannot be used in it: the
-- CHECK constraint and queue_stats compare it as text, and the functions
-- that name it are PL/pgSQL (parsed when they first run).
ALTER TYPE pgsched.job_state ADD VALUE IF NOT EXISTS 'waiting' AFTER 'scheduled';

ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_state_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_state_valid CHECK (CASE state
        WHEN 'running' THEN lease_token IS NOT NULL AND leased_by IS NOT NULL AND lease_expires_at IS NOT NULL
        WHEN 'available' THEN lease_token IS NULL
        WHEN 'scheduled' THEN lease_token IS NULL
        -- compared as text: an enum value cannot be used in the transaction that adds it (a migration)
        ELSE state::text = 'waiting' AND lease_token IS NULL END);
COMMENT ON TABLE pgsched.jobs IS
    'Active jobs (scheduled, waiting, available, running), one partition per shard. Plain INSERT with task and args works; everything else goes through functions.';

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

REVOKE ALL ON pgsched.job_dependencies FROM PUBLIC;
GRANT SELECT ON pgsched.job_dependencies TO pgsched_worker;
ALTER TABLE pgsched.job_dependencies ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_dependencies_unscoped ON pgsched.job_dependencies
    USING ((SELECT pgsched._tenant_scope()) IS NULL);

-- queue_stats gains a last column (waiting): the revision's copy of
-- 40_views.sql adds it with CREATE OR REPLACE VIEW.

-- == Grants (90_grants.sql): after the functions (enqueue and enqueue_many were re-created). ==

REVOKE EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many, pgsched._depend, pgsched._release,
    pgsched._release_dependents, pgsched._fail_dependents FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many TO pgsched_enqueue;
-- The revision re-runs 40_views.sql (queue_stats changed), which resets the views' options.
ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);
ALTER VIEW pgsched.queue_history SET (security_invoker = true);
