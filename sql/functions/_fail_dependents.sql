-- _fail_dependents
-- contract: a job (p_id) just ended p_state ('dead' or 'cancelled'): every
-- waiting job that depends on it with policy 'cancel' is cancelled, with the
-- error 'dependency <id> <state>', and so on down the graph (their own
-- dependents see 'dependency <id> cancelled'); dependents with policy 'wait'
-- stay waiting, their dependency row kept, until a redrive of the job
-- (pgsched.retry) completes. _finish calls it; each job cancelled here is
-- filed by _finish too, which drops that job's own dependency rows.
--
-- Breadth first, one level per round, instead of _finish recursing into
-- itself: a chain of a thousand jobs would otherwise nest a thousand calls
-- deep. pgsched.settling tells the nested _finish calls to leave the walk
-- to this loop.
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
    v_frontier bigint[] := ARRAY[p_id];
    v_next bigint[];
    v_state text := p_state::text;
    v_edge record;
    v_job pgsched.jobs;
    v_count integer := 0;
BEGIN
    PERFORM pg_catalog.set_config('pgsched.settling', 'on', true);
    WHILE pg_catalog.cardinality(v_frontier) > 0 LOOP
        v_next := '{}';
        -- In id order, like every path that takes several job rows.
        FOR v_edge IN
            SELECT DISTINCT ON (d.job) d.job, d.job_shard, d.depends_on
            FROM pgsched.job_dependencies d
            WHERE d.depends_on = ANY (v_frontier) AND d.on_failure = 'cancel'
            ORDER BY d.job, d.depends_on
        LOOP
            DELETE FROM pgsched.jobs j
            WHERE j.id = v_edge.job AND j.shard = v_edge.job_shard AND j.state = 'waiting'
            RETURNING j.* INTO v_job;
            IF FOUND THEN
                PERFORM pgsched._finish(v_job, 'cancelled', p_now,
                                        pg_catalog.format('dependency %s %s', v_edge.depends_on, v_state));
                v_next := v_next || v_job.id;
                v_count := v_count + 1;
            END IF;
        END LOOP;
        v_frontier := v_next;
        v_state := 'cancelled';
    END LOOP;
    PERFORM pg_catalog.set_config('pgsched.settling', '', true);
    RETURN v_count;
END
$$;
