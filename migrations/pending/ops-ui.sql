-- ops-ui: the per-minute queue rollup (pgsched.queue_minutes, read through the
-- view pgsched.queue_history), the BRIN index it reads job_events by, and the
-- grants of rollup_queue_history, find_jobs, cancel_many and retry_many.
--
-- Part 1 must run BEFORE the copied 40_views.sql (the view queue_history
-- reads the table); part 2 AFTER the copied function files and 40_views.sql.

-- == part 1 ==================================================================

ALTER TABLE pgsched.config ADD COLUMN queue_history_retention interval NOT NULL DEFAULT '30 days';

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
CREATE TABLE pgsched.queue_minutes_default PARTITION OF pgsched.queue_minutes DEFAULT;

CREATE INDEX job_events_at_idx ON pgsched.job_events USING brin (at);

-- == part 2 ==================================================================

REVOKE ALL ON pgsched.queue_minutes FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched.rollup_queue_history, pgsched.cancel_many, pgsched.retry_many,
    pgsched.find_jobs FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.find_jobs TO pgsched_enqueue, pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.rollup_queue_history TO pgsched_worker;
GRANT SELECT ON pgsched.queue_minutes, pgsched.queue_history TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.cancel_many, pgsched.retry_many TO pgsched_admin;
ALTER VIEW pgsched.queue_history SET (security_invoker = true);
ALTER TABLE pgsched.queue_minutes ENABLE ROW LEVEL SECURITY;
CREATE POLICY queue_minutes_unscoped ON pgsched.queue_minutes
    USING (pgsched._tenant_visible(NULL));

-- Day partitions of queue_minutes from yesterday on, as a fresh install has.
SELECT pgsched.maintain();
