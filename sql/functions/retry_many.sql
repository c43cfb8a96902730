-- retry_many
-- contract: pgsched.retry for each of p_ids, in one statement and one
-- transaction, in id order (so two bulk calls never deadlock), each id once;
-- returns (job_id, result) with retry()'s answer per job. It runs with the
-- caller's rights and goes through retry() itself, so every rule of a single
-- retry (tenant confinement, one redrive at a time) holds for each job. At most
-- 10000 ids per call.
CREATE OR REPLACE FUNCTION pgsched.retry_many(
    p_ids bigint[],
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, result text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    -- Refused at once for a moved clock, even when there is no job to pass it to.
    PERFORM pgsched._clock(p_now);
    IF pg_catalog.cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'pgsched: retry_many takes at most 10000 jobs per call, not %',
            pg_catalog.cardinality(p_ids)
            USING ERRCODE = 'program_limit_exceeded', HINT = 'Call it once per slice of the ids.';
    END IF;
    FOR job_id IN SELECT DISTINCT u.id FROM pg_catalog.unnest(p_ids) AS u(id) WHERE u.id IS NOT NULL ORDER BY u.id
    LOOP
        result := pgsched.retry(job_id, p_now);
        RETURN NEXT;
    END LOOP;
END
$$;
