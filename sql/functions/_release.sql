-- _release
-- contract: makes due those of the waiting jobs (p_jobs on p_shards) that
-- have no dependency left in pgsched.job_dependencies: 'available' (run_at
-- moved up to p_now, so start lag counts from the release), or 'scheduled'
-- when run_at is still ahead; wakes their queues. Returns how many it made due.
--
-- Two statements on purpose. The first locks the jobs in id order; the
-- second, with a snapshot taken after those locks, looks at what is left.
-- Two dependencies completing at once in two transactions each delete their
-- own row and then queue here: the second one sees the first one's delete
-- committed, so the last completion always releases the job.
CREATE OR REPLACE FUNCTION pgsched._release(
    p_jobs   bigint[],
    p_shards smallint[],
    p_now    timestamptz
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_queues text[];
    v_scheduled boolean;
    v_count integer;
BEGIN
    PERFORM 1
    FROM pgsched.jobs j
    JOIN unnest(p_jobs, p_shards) AS u(id, shard) ON j.id = u.id AND j.shard = u.shard
    WHERE j.state = 'waiting'
    ORDER BY j.id
    FOR UPDATE OF j;

    WITH released AS (
        UPDATE pgsched.jobs j
        SET state = CASE WHEN j.run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            run_at = greatest(j.run_at, p_now)
        FROM unnest(p_jobs, p_shards) AS u(id, shard)
        WHERE j.id = u.id AND j.shard = u.shard AND j.state = 'waiting'
          AND NOT EXISTS (SELECT 1 FROM pgsched.job_dependencies d WHERE d.job = j.id)
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
