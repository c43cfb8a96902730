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
