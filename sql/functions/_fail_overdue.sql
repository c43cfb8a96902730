-- _fail_overdue
-- contract: fails the running jobs whose run is past its deadline
-- (deadline_at, set by start() from the job's or the task's timeout) plus
-- pgsched.config.timeout_grace, whatever their heartbeats say: each through
-- pgsched.fail() under its current token, with the error 'timed out after N s',
-- so its retry policy decides (retry with backoff, or dead) and the token is
-- spent: the hung worker's late complete(), fail() or heartbeat() is refused.
-- Returns the number of jobs failed (at most p_limit). expire_leases calls it,
-- so scanners and housekeeping workers both enforce deadlines. A command job
-- (its timeout column is the command's timeout + config.command_timeout_margin,
-- see enqueue_command) gets the reason spelt out: 'timed out after 31 s: the
-- command runner did not end the command within the margin of its 1 s timeout'.
--
-- Only started runs count (started_at is set by start() and cleared by every
-- claim, so a deadline_at left from an earlier run never applies). Candidates
-- are locked with SKIP LOCKED: a completion in flight wins, and fail() checks
-- the token again.
CREATE OR REPLACE FUNCTION pgsched._fail_overdue(
    p_now   timestamptz,
    p_limit integer,
    p_shard integer
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
    v_grace interval;
    v_job record;
    v_count integer := 0;
BEGIN
    SELECT c.timeout_grace INTO v_grace FROM pgsched.config c;
    FOR v_job IN
        SELECT j.id, j.shard, j.lease_token, j.deadline_at - j.started_at AS timeout,
               CASE WHEN j.task = 'pgsched.command' AND pg_catalog.jsonb_typeof(j.args -> 'timeout_s') = 'number'
                    THEN j.args ->> 'timeout_s' END AS command_timeout
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.started_at IS NOT NULL AND j.deadline_at < v_now - v_grace
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        IF pgsched.fail(v_job.id, v_job.lease_token,
                        pg_catalog.format('timed out after %s s',
                            pg_catalog.round(EXTRACT(epoch FROM v_job.timeout), 3)::double precision)
                        || CASE WHEN v_job.command_timeout IS NOT NULL THEN pg_catalog.format(
                            ': the command runner did not end the command within the margin of its %s s timeout',
                            v_job.command_timeout) ELSE '' END,
                        NULL, false, p_now) <> 'lease_lost' THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END
$$;
