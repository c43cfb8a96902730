-- _run_options_problem
-- contract: the name of the rule of pgsched.jobs that a new job's timeout or
-- concurrency_key breaks (jobs_timeout_positive: not positive;
-- jobs_concurrency_key_length: not 1 to 200 characters), NULL when neither
-- does (NULL is allowed for both). The same rules as the table's CHECKs, in
-- one place for _check_run_options and enqueue_many's set-based pass; a plain
-- SQL expression, so the planner inlines it there.
CREATE OR REPLACE FUNCTION pgsched._run_options_problem(p_timeout interval, p_concurrency_key text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE
    WHEN p_timeout <= interval '0' THEN 'jobs_timeout_positive'
    WHEN pg_catalog.length(p_concurrency_key) NOT BETWEEN 1 AND 200 THEN 'jobs_concurrency_key_length'
END
$$;
