-- _fail_dependents
-- contract: a job (p_id) just ended p_state ('dead' or 'cancelled'): every
-- waiting job that depends on it with policy 'cancel' is cancelled, with the
-- error 'dependency <id> <state>', and so on down the graph (their own
-- dependents see 'dependency <id> cancelled'); dependents with policy 'wait'
-- stay waiting, their dependency row kept, until a redrive of the job
-- (pgsched.retry) completes. _finish calls it; each job cancelled here is
-- filed by _finish too, which drops that job's own dependency rows.
--
-- The whole graph below is found first (a recursive query), and the rows
-- that led to it are deleted before the jobs are filed: each _finish then
-- finds no 'cancel' dependents left, so it calls back here for nothing, and
-- a chain of thousands of jobs is one loop, not a thousand nested calls.
CREATE OR REPLACE FUNCTION pgsched._fail_dependents(
    p_id    bigint,
    p_state pgsched.job_state,
    p_now   timestamptz
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_jobs bigint[];
    v_shards smallint[];
    v_deps bigint[];
    v_job pgsched.jobs;
    v_count integer := 0;
BEGIN
    WITH RECURSIVE doomed (job, shard, dep) AS (
        SELECT d.job, d.job_shard, d.depends_on
        FROM pgsched.job_dependencies d
        WHERE d.depends_on = p_id AND d.on_failure = 'cancel'
        UNION
        SELECT d.job, d.job_shard, d.depends_on
        FROM doomed x
        JOIN pgsched.job_dependencies d ON d.depends_on = x.job AND d.on_failure = 'cancel'
    ), reasons AS (
        -- one reason per job: its lowest dependency among those that fail
        SELECT DISTINCT ON (x.job) x.job, x.shard, x.dep FROM doomed x ORDER BY x.job, x.dep
    )
    SELECT pg_catalog.array_agg(f.job ORDER BY f.job), pg_catalog.array_agg(f.shard ORDER BY f.job),
           pg_catalog.array_agg(f.dep ORDER BY f.job)
    INTO v_jobs, v_shards, v_deps
    FROM reasons f;
    IF v_jobs IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM pgsched.job_dependencies d
    WHERE d.on_failure = 'cancel' AND (d.depends_on = p_id OR d.depends_on = ANY (v_jobs));
    -- In id order, like every path that takes several job rows.
    FOR i IN 1 .. pg_catalog.cardinality(v_jobs) LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = v_jobs[i] AND j.shard = v_shards[i] AND j.state = 'waiting'
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._finish(v_job, 'cancelled', p_now, pg_catalog.format(
                'dependency %s %s', v_deps[i], CASE WHEN v_deps[i] = p_id THEN p_state::text ELSE 'cancelled' END));
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END
$$;
