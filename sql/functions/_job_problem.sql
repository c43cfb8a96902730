-- _job_problem
-- contract: the name of the first rule of pgsched.jobs that a new job with
-- these values breaks (a CHECK constraint's name, or jobs_<column>_not_null),
-- NULL when it breaks none. The same rules as the table's constraints, plus
-- those the functions keep (labels, the key's length in bytes), so a job is
-- refused with its value named before any row or key is written. A plain SQL
-- expression: the planner inlines it into a batch's one set-based check.
CREATE OR REPLACE FUNCTION pgsched._job_problem(
    p_task text, p_queue text, p_args jsonb, p_priority integer, p_run_at timestamptz,
    p_max_attempts integer, p_key text, p_labels text[], p_tenant text
)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE
    WHEN p_task IS NULL THEN 'jobs_task_not_null'
    WHEN p_task !~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' OR pg_catalog.length(p_task) > 200 THEN 'jobs_task_valid'
    WHEN p_queue IS NULL THEN 'jobs_queue_not_null'
    WHEN p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$' OR pg_catalog.length(p_queue) > 63 THEN 'jobs_queue_valid'
    WHEN p_args IS NULL THEN 'jobs_args_not_null'
    WHEN pg_catalog.jsonb_typeof(p_args) <> 'object' THEN 'jobs_args_is_object'
    WHEN p_priority IS NULL THEN 'jobs_priority_not_null'
    WHEN p_priority NOT BETWEEN -1000000 AND 1000000 THEN 'jobs_priority_range'
    WHEN p_run_at IS NULL THEN 'jobs_run_at_not_null'
    WHEN NOT pg_catalog.isfinite(p_run_at) THEN 'jobs_run_at_finite'
    WHEN p_max_attempts <= 0 THEN 'jobs_max_attempts_positive'
    WHEN p_max_attempts > 1000000 THEN 'jobs_max_attempts_range'
    WHEN pg_catalog.octet_length(p_key) NOT BETWEEN 1 AND 1000 THEN 'jobs_idempotency_key_length'
    WHEN p_labels IS NULL THEN 'jobs_labels_not_null'
    WHEN pg_catalog.array_position(p_labels, NULL) IS NOT NULL
      OR pg_catalog.array_position(p_labels, ''::text) IS NOT NULL THEN 'jobs_labels_valid'
    WHEN pg_catalog.length(p_tenant) NOT BETWEEN 1 AND 200 THEN 'jobs_tenant_length'
END
$$;
