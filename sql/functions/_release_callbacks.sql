-- _release_callbacks
-- contract: a job (p_id) just ended dead or cancelled: the dependency rows
-- of its dependents with policy 'run' (batch callbacks) go, as a
-- completion's would, and every such dependent left with none is made due
-- (_release). _finish calls it. One index probe on depends_on finds the
-- rows, so ending the last member of a large batch costs what the first did.
CREATE OR REPLACE FUNCTION pgsched._release_callbacks(
    p_id  bigint,
    p_now timestamptz
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_jobs bigint[];
    v_shards smallint[];
    v_met integer[];
BEGIN
    WITH freed AS (
        DELETE FROM pgsched.job_dependencies d
        WHERE d.depends_on = p_id AND d.on_failure = 'run'
        RETURNING d.job, d.job_shard
    )
    SELECT pg_catalog.array_agg(f.job ORDER BY f.job), pg_catalog.array_agg(f.job_shard ORDER BY f.job),
           pg_catalog.array_agg(1 ORDER BY f.job)
    INTO v_jobs, v_shards, v_met
    FROM freed f;
    IF v_jobs IS NULL THEN
        RETURN 0;
    END IF;
    RETURN pgsched._release(v_jobs, v_shards, p_now, v_met);
END
$$;
