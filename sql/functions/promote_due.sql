-- promote_due
-- contract: makes scheduled jobs whose run_at has come 'available' and wakes
-- workers of their queues (one NOTIFY per queue). Reads only due rows of the
-- scheduled index, so a backlog of far-future jobs costs nothing. Returns the
-- number promoted (at most p_limit; call again while it is p_limit).
CREATE OR REPLACE FUNCTION pgsched.promote_due(
    p_now   timestamptz DEFAULT NULL,
    p_limit integer     DEFAULT 10000,
    p_shard integer     DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, pg_catalog.now());
    v_count integer;
    v_queues text[];
BEGIN
    WITH due AS MATERIALIZED (
        SELECT j.id, j.shard
        FROM pgsched.jobs j
        WHERE j.state = 'scheduled' AND j.run_at <= v_now
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.run_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), promoted AS (
        UPDATE pgsched.jobs j
        SET state = 'available'
        FROM due
        WHERE j.id = due.id AND j.shard = due.shard AND j.state = 'scheduled' AND j.run_at <= v_now
        RETURNING j.queue
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT p.queue)
    INTO v_count, v_queues
    FROM promoted p;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    RETURN v_count;
END
$$;
