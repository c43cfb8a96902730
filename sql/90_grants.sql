-- pgsched: privileges and row-level security (DESIGN §5).
--
--   pgsched_enqueue  enqueue (functions or INSERT INTO pgsched.jobs) and read jobs
--   pgsched_worker   claim, heartbeat, complete, fail, snooze, release, housekeeping;
--                    reads everything, writes nothing directly
--   pgsched_admin    both of the above, plus cancel, retry, queue pause/resume, config
--   pgsched_tenant_scoped  a marker: members see and write only the tenant named in
--                    the setting pgsched.tenant (nothing when it is missing)
--
-- Applications connect as roles granted these, never as the owner. Every
-- function that writes runs as SECURITY DEFINER with a fixed search_path.

REVOKE ALL ON SCHEMA pgsched FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA pgsched FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgsched FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgsched FROM PUBLIC;
GRANT USAGE ON SCHEMA pgsched TO pgsched_enqueue, pgsched_worker, pgsched_admin;

GRANT pgsched_enqueue, pgsched_worker TO pgsched_admin;

-- Used by the row-level security policies, so callable by whoever reads.
GRANT EXECUTE ON FUNCTION pgsched._tenant_visible(text) TO pgsched_enqueue, pgsched_worker, pgsched_admin;

GRANT EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many, pgsched.schema_revision TO pgsched_enqueue;
GRANT INSERT ON pgsched.jobs TO pgsched_enqueue;
GRANT USAGE ON SEQUENCE pgsched.jobs_id_seq TO pgsched_enqueue;
GRANT SELECT ON pgsched.jobs, pgsched.job_history, pgsched.queues, pgsched.queue_stats, pgsched.dead_letters
    TO pgsched_enqueue;

GRANT EXECUTE ON FUNCTION
    pgsched.claim, pgsched.heartbeat, pgsched.complete, pgsched.fail, pgsched.snooze, pgsched.release,
    pgsched.expire_leases, pgsched.promote_due, pgsched.next_due, pgsched.maintain,
    pgsched.register_tasks, pgsched.register_worker, pgsched.unregister_worker, pgsched.schema_revision,
    pgsched.acquire_shards, pgsched.release_shards, pgsched.scan_shard, pgsched.add_occurrences,
    pgsched.schedule_error, pgsched.vacuum_candidates
    TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.start, pgsched.cancels_requested TO pgsched_worker;
GRANT SELECT ON pgsched.jobs, pgsched.job_history, pgsched.job_events, pgsched.config, pgsched.tasks,
    pgsched.queues, pgsched.workers, pgsched.idempotency_keys,
    pgsched.queue_stats, pgsched.dead_letters, pgsched.workers_live,
    pgsched.schedules, pgsched.schedule_occurrences, pgsched.scanners, pgsched.shard_leases,
    pgsched.schedule_status
    TO pgsched_worker;

GRANT EXECUTE ON FUNCTION pgsched.cancel, pgsched.retry, pgsched.pause_queue, pgsched.resume_queue,
    pgsched.upsert_schedule, pgsched.remove_schedule, pgsched.pause_schedule, pgsched.resume_schedule
    TO pgsched_admin;
GRANT INSERT, UPDATE, DELETE ON pgsched.schedules TO pgsched_admin;
GRANT UPDATE ON pgsched.config TO pgsched_admin;
GRANT INSERT, UPDATE, DELETE ON pgsched.tasks, pgsched.queues TO pgsched_admin;

-- Views run with the caller's rights, so row-level security applies through them.
ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);

ALTER TABLE pgsched.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_tenant ON pgsched.jobs
    USING (pgsched._tenant_visible(tenant))
    WITH CHECK (pgsched._tenant_visible(tenant));
ALTER TABLE pgsched.job_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_history_tenant ON pgsched.job_history
    USING (pgsched._tenant_visible(tenant));
ALTER TABLE pgsched.job_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_events_unscoped ON pgsched.job_events
    USING (pgsched._tenant_visible(NULL));
