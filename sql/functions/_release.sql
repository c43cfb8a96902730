-- _release
-- contract: makes due those of the waiting jobs (p_jobs on p_shards) that
-- have no dependency left: 'available' (run_at moved up to p_now, so start
-- lag counts from the release), or 'scheduled' when run_at is still ahead;
-- wakes their queues. p_met[i], when given, is how many of job i's
-- pgsched.job_dependencies rows the caller has just deleted (met). Returns
-- how many it made due.
--
-- A waiting job counts its rows left (waits_for, set by _depend), so the
-- completion that meets the last of 10,000 dependencies updates one counter
-- and reads nothing of the others: no probe of job_dependencies, whose
-- statistics after a large fan-in say every row waits for one job (the
-- planner then reads them all). A job without a count (waits_for NULL)
-- has its rows looked up.
--
-- Statements in order on purpose. The first locks the jobs in id order; the
-- counters then go down under those locks: two dependencies completing at
-- once in two transactions each delete their own row and queue here, the
-- second one decrements what the first one left, so the last completion
-- always releases the job.
CREATE OR REPLACE FUNCTION pgsched._release(
    p_jobs   bigint[],
    p_shards smallint[],
    p_now    timestamptz,
    p_met    integer[] DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan per statement, kept: planning them anew over every shard's
-- partition cost more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queues text[];
    v_scheduled boolean;
    v_count integer;
BEGIN
    -- Rows by id = ANY (an id lives on one shard; the shards prune): index
    -- probes in any plan, where a join with unnest() may be planned as a
    -- scan of every partition.
    PERFORM 1
    FROM pgsched.jobs j
    WHERE j.id = ANY (p_jobs) AND j.shard = ANY (p_shards) AND j.state = 'waiting'
    ORDER BY j.id
    FOR UPDATE OF j;

    IF p_met IS NOT NULL THEN
        UPDATE pgsched.jobs j
        SET waits_for = j.waits_for - u.met
        FROM unnest(p_jobs, p_met) AS u(id, met)
        WHERE j.id = ANY (p_jobs) AND j.shard = ANY (p_shards) AND j.id = u.id
          AND j.state = 'waiting' AND j.waits_for IS NOT NULL AND u.met > 0;
    END IF;

    WITH released AS (
        UPDATE pgsched.jobs j
        SET state = CASE WHEN j.run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            run_at = greatest(j.run_at, p_now),
            waits_for = NULL
        WHERE j.id = ANY (p_jobs) AND j.shard = ANY (p_shards) AND j.state = 'waiting'
          AND CASE WHEN j.waits_for IS NULL
                   THEN NOT EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.job = j.id)
                   ELSE j.waits_for <= 0 END
        RETURNING j.queue, j.state
    )
    SELECT pg_catalog.array_agg(DISTINCT r.queue) FILTER (WHERE r.state = 'available'),
           pg_catalog.bool_or(r.state = 'scheduled'), pg_catalog.count(*)
    INTO v_queues, v_scheduled, v_count
    FROM released r;
    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    IF v_scheduled THEN
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN v_count;
END
$$;
