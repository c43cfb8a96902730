-- timeouts: per-job timeouts with a deadline the database enforces, and bounded shutdown hand-backs.
-- Signatures that change (enqueue gains timeout; start returns the run's timeout).
DROP FUNCTION pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text);
DROP FUNCTION pgsched.start(bigint[], bigint[], smallint[], timestamptz);

ALTER TABLE pgsched.jobs
    ADD COLUMN timeout interval,
    ADD COLUMN deadline_at timestamptz,
    ADD COLUMN handbacks integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT jobs_timeout_positive CHECK (timeout > interval '0');
COMMENT ON COLUMN pgsched.jobs.timeout IS
    'Time limit of each run (plain INSERT may set it); past deadline_at plus config.timeout_grace, housekeeping fails the run.';

ALTER TABLE pgsched.tasks
    ADD COLUMN timeout interval,
    ADD CONSTRAINT tasks_timeout_positive CHECK (timeout > interval '0');

ALTER TABLE pgsched.config
    ADD COLUMN timeout_grace interval NOT NULL DEFAULT '5 seconds',
    ADD COLUMN max_handbacks integer NOT NULL DEFAULT 3,
    ADD CONSTRAINT config_timeout_grace_range CHECK (timeout_grace BETWEEN interval '0' AND interval '1 day'),
    ADD CONSTRAINT config_max_handbacks_range CHECK (max_handbacks BETWEEN 0 AND 1000000);

-- A plain INSERT may set a job's timeout.
GRANT INSERT (timeout) ON pgsched.jobs TO pgsched_enqueue;

-- After the changed function files (enqueue and start are created anew,
-- _fail_overdue is new): the privileges a fresh install gives them.
REVOKE EXECUTE ON FUNCTION pgsched.enqueue, pgsched.start, pgsched._fail_overdue FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.enqueue TO pgsched_enqueue;
GRANT EXECUTE ON FUNCTION pgsched.start TO pgsched_worker;
