-- _release_dependents
-- contract: for those of p_ids that completed in this transaction (at
-- p_now), drops the dependency rows that waited for them and makes due every
-- dependent left with none (_release). complete() calls it, in a statement of
-- its own after the one that finished the jobs: an enqueue that added a
-- dependency on one of them held that job's row (FOR KEY SHARE) until it
-- committed, so this statement's snapshot sees the row it added.
CREATE OR REPLACE FUNCTION pgsched._release_dependents(
    p_ids bigint[],
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
    -- Only what this transaction completed: a stale completion of a job that
    -- since died must not release dependents that wait for its redrive.
    -- The rows go by the primary key's leading column, one probe per id: a
    -- join could be planned as a scan of every dependency row (after a large
    -- fan-in the statistics make that look cheap), and a batch callback's
    -- 10,000th member would read the other 9,999 rows.
    WITH freed AS (
        DELETE FROM pgsched.job_dependencies d
        WHERE d.depends_on = ANY (ARRAY(
            SELECT h.id
            FROM pgsched.job_history h
            WHERE h.id = ANY (p_ids) AND h.finished_at = p_now AND h.state = 'completed'
              AND h.finished_xid = pg_catalog.pg_current_xact_id()))
        RETURNING d.job, d.job_shard
    )
    SELECT pg_catalog.array_agg(f.job ORDER BY f.job), pg_catalog.array_agg(f.job_shard ORDER BY f.job),
           pg_catalog.array_agg(f.n ORDER BY f.job)
    INTO v_jobs, v_shards, v_met
    FROM (SELECT fr.job, fr.job_shard, pg_catalog.count(*)::integer AS n FROM freed fr GROUP BY fr.job, fr.job_shard) f;
    IF v_jobs IS NULL THEN
        RETURN 0;
    END IF;
    RETURN pgsched._release(v_jobs, v_shards, p_now, v_met);
END
$$;
