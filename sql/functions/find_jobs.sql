-- find_jobs
-- contract: the jobs, active or finished, matching every filter given (NULL:
-- any), newest id first: the task (exact, or a prefix ending in '*'), states,
-- queue, tenant, args containing p_args (jsonb @>), and a time range
-- [p_since, p_until) on when the job was enqueued (p_time 'created', the
-- default), became due ('due') or finished ('finished': finished jobs only).
-- A finished job appears once, as its latest run, and not at all while a
-- redrive of it is active. Keyset pagination: p_before is the last id of the
-- previous page; p_max_id bounds the set (so a confirmed bulk action touches
-- only the jobs that were there). A page is 1 to 10000 jobs (p_limit; NULL
-- would be every match, a scan of the whole history): larger sets are read
-- page by page. Runs with the caller's rights: row-level security confines a
-- tenant-bound session to its tenant.
CREATE OR REPLACE FUNCTION pgsched.find_jobs(
    p_task   text        DEFAULT NULL,
    p_states text[]      DEFAULT NULL,
    p_queue  text        DEFAULT NULL,
    p_tenant text        DEFAULT NULL,
    p_args   jsonb       DEFAULT NULL,
    p_since  timestamptz DEFAULT NULL,
    p_until  timestamptz DEFAULT NULL,
    p_time   text        DEFAULT 'created',
    p_before bigint      DEFAULT NULL,
    p_max_id bigint      DEFAULT NULL,
    p_limit  integer     DEFAULT 50
)
RETURNS TABLE (id bigint, queue text, state text, task text, args jsonb, priority integer, attempt integer,
               max_attempts integer, run_at timestamptz, worker text, error text, tenant text,
               created_at timestamptz, finished_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'pgsched: find_jobs p_limit must be between 1 and 10000, not %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Read more page by page: p_before => the last id of the previous page.';
    END IF;
    RETURN QUERY
    WITH active AS (
        SELECT j.id, j.queue, j.state::text AS state, j.task, j.args, j.priority, j.attempt, j.max_attempts,
               j.run_at, j.leased_by AS worker, j.last_error AS error, j.tenant, j.created_at,
               NULL::timestamptz AS finished_at
        FROM pgsched.jobs j
        WHERE (p_task IS NULL OR j.task = p_task
               OR (right(p_task, 1) = '*' AND starts_with(j.task, rtrim(p_task, '*'))))
          AND (p_states IS NULL OR j.state::text = ANY(p_states))
          AND (p_queue IS NULL OR j.queue = p_queue)
          AND (p_tenant IS NULL OR j.tenant = p_tenant)
          AND (p_args IS NULL OR j.args @> p_args)
          AND (p_since IS NULL AND p_until IS NULL OR p_time IS DISTINCT FROM 'finished')
          AND (p_since IS NULL OR CASE p_time WHEN 'due' THEN j.run_at ELSE j.created_at END >= p_since)
          AND (p_until IS NULL OR CASE p_time WHEN 'due' THEN j.run_at ELSE j.created_at END < p_until)
          AND (p_before IS NULL OR j.id < p_before)
          AND (p_max_id IS NULL OR j.id <= p_max_id)
        ORDER BY j.id DESC
        LIMIT p_limit
    ), finished AS (
        SELECT h.id, h.queue, h.state::text AS state, h.task, h.args, h.priority, h.attempt, h.max_attempts,
               h.run_at, h.leased_by AS worker, h.error, h.tenant, h.created_at, h.finished_at
        FROM pgsched.job_history h
        WHERE (p_task IS NULL OR h.task = p_task
               OR (right(p_task, 1) = '*' AND starts_with(h.task, rtrim(p_task, '*'))))
          AND (p_states IS NULL OR h.state::text = ANY(p_states))
          AND (p_queue IS NULL OR h.queue = p_queue)
          AND (p_tenant IS NULL OR h.tenant = p_tenant)
          AND (p_args IS NULL OR h.args @> p_args)
          AND (p_since IS NULL OR CASE p_time WHEN 'due' THEN h.run_at WHEN 'finished' THEN h.finished_at
                                  ELSE h.created_at END >= p_since)
          AND (p_until IS NULL OR CASE p_time WHEN 'due' THEN h.run_at WHEN 'finished' THEN h.finished_at
                                  ELSE h.created_at END < p_until)
          AND (p_before IS NULL OR h.id < p_before)
          AND (p_max_id IS NULL OR h.id <= p_max_id)
          AND NOT EXISTS (SELECT 1 FROM pgsched.job_history n WHERE n.id = h.id AND n.finished_at > h.finished_at)
          AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
        ORDER BY h.id DESC
        LIMIT p_limit
    )
    SELECT * FROM (SELECT * FROM active UNION ALL SELECT * FROM finished) f
    ORDER BY f.id DESC
    LIMIT p_limit;
END
$$;
