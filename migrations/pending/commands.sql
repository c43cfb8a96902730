-- commands: command jobs (pgsched.enqueue_command, role pgsched_command) and
-- service jobs (jobs.service, pgsched.enqueue_service).
-- Applied after the copied function files (enqueue_command.sql,
-- enqueue_service.sql, _check_command_task.sql, fail.sql, _finish.sql,
-- complete.sql, retry.sql, expire_leases.sql, enqueue.sql, enqueue_many.sql,
-- tg_jobs__before_insert.sql, tg_schedules__before_write.sql) EXCEPT the
-- column additions below, which must come first in the revision: _finish,
-- complete, retry, expire_leases and enqueue_service name jobs.service.

-- (first in the revision)
ALTER TABLE pgsched.jobs ADD COLUMN service boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN pgsched.jobs.service IS
    'A service job: runs until cancelled, restarted elsewhere when its lease expires (never dead by expiries).';
ALTER TABLE pgsched.job_history ADD COLUMN service boolean NOT NULL DEFAULT false;

-- (after the copied files)
-- The role, as 00_schema.sql creates it (cluster-wide: only when missing).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_command') THEN
        CREATE ROLE pgsched_command NOLOGIN;
    END IF;
END
$$;

-- fail() gained a defaulted parameter (result jsonb): drop the old signature.
DROP FUNCTION IF EXISTS pgsched.fail(bigint, bigint, text, timestamptz, boolean, timestamptz);

REVOKE EXECUTE ON FUNCTION pgsched.fail, pgsched.enqueue_command, pgsched.enqueue_service,
    pgsched._check_command_task FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.fail TO pgsched_worker;
GRANT USAGE ON SCHEMA pgsched TO pgsched_command;
GRANT EXECUTE ON FUNCTION pgsched.enqueue_service TO pgsched_enqueue;
GRANT EXECUTE ON FUNCTION pgsched.enqueue_command, pgsched.schema_revision TO pgsched_command;
GRANT INSERT (service) ON pgsched.jobs TO pgsched_enqueue;

-- Downgrade (for the hand-written part of the revision's .down.sql, after the
-- function files it restores; its DROP FUNCTION lines remove enqueue_command,
-- enqueue_service, _check_command_task and the new fail signature):
--   REVOKE EXECUTE ON FUNCTION pgsched.fail FROM PUBLIC;
--   GRANT EXECUTE ON FUNCTION pgsched.fail TO pgsched_worker;
--   REVOKE INSERT (service) ON pgsched.jobs FROM pgsched_enqueue;
--   ALTER TABLE pgsched.job_history DROP COLUMN service;
--   ALTER TABLE pgsched.jobs DROP COLUMN service;
--   (the role pgsched_command is cluster-wide: left in place, as the other roles are)
