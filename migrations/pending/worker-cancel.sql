-- worker-cancel: handler starts recorded apart from claims (pgsched.start()),
-- cancel requests delivered by NOTIFY, and the poll for workers without LISTEN.
-- Applied after the copied files (claim.sql, cancel.sql, complete.sql,
-- start.sql, cancels_requested.sql, tg_jobs__before_insert.sql, 40_views.sql).

-- The claim's time; started_at now means the handler's start (NULL while a
-- claimed job waits for a slot). Column last, as in sql/10_tables.sql.
-- (Must exist before claim.sql/complete.sql/40_views.sql are replaced: put it
-- first in the revision.)
ALTER TABLE pgsched.jobs ADD COLUMN claimed_at timestamptz;
COMMENT ON COLUMN pgsched.jobs.started_at IS
    'When the handler of the current attempt started (pgsched.start()); NULL while claimed and waiting for a slot.';
-- Jobs running at upgrade time were started by workers that stamped the claim.
UPDATE pgsched.jobs SET claimed_at = started_at WHERE state = 'running' AND claimed_at IS NULL;

-- New functions: the worker role only.
REVOKE EXECUTE ON FUNCTION pgsched.start(bigint[], bigint[], smallint[], timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched.cancels_requested(bigint[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.start, pgsched.cancels_requested TO pgsched_worker;

-- 40_views.sql now uses CREATE OR REPLACE VIEW (so it can be copied whole), which
-- resets a view's options: set them again, as sql/90_grants.sql does.
ALTER VIEW pgsched.queue_stats SET (security_invoker = true);
ALTER VIEW pgsched.dead_letters SET (security_invoker = true);
ALTER VIEW pgsched.workers_live SET (security_invoker = true);
ALTER VIEW pgsched.schedule_status SET (security_invoker = true);
