-- perf: audit by exception (pgsched.job_timeline reads claims and completions from the rows).
-- Run the ALTER TABLE before the revision creates pgsched.job_timeline (the view reads job_history.claimed_at).
ALTER TABLE pgsched.job_history ADD COLUMN claimed_at timestamptz;
COMMENT ON TABLE pgsched.job_events IS
    'Audit trail by exception: the transitions the job''s row cannot tell (the claim and completion of a job that succeeds are read from job_history); pgsched.job_timeline gives every transition. Partitioned by day.';
GRANT SELECT ON pgsched.job_timeline TO pgsched_worker;
-- 40_views.sql is re-created whole (CREATE OR REPLACE VIEW resets the views' options): run as the caller again.
ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);
ALTER VIEW pgsched.queue_history SET (security_invoker = true);
