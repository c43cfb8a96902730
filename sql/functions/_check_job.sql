-- _check_job
-- contract: raises, naming the rule, the column and the value that is wrong,
-- when a new job breaks a rule of pgsched.jobs (see _job_problem):
-- not_null_violation for a missing value, check_violation otherwise, with
-- CONSTRAINT, COLUMN, TABLE and SCHEMA set. p_row, 1-based, is the job's
-- position in a batch (the ord that enqueue_many returns) and leads the
-- message. Long values are cut to their first 60 characters.
CREATE OR REPLACE FUNCTION pgsched._check_job(
    p_task text, p_queue text, p_args jsonb, p_priority integer, p_run_at timestamptz,
    p_max_attempts integer, p_key text, p_labels text[], p_tenant text, p_row bigint DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_rule text := pgsched._job_problem(p_task, p_queue, p_args, p_priority, p_run_at,
                                        p_max_attempts, p_key, p_labels, p_tenant);
    v_column text;
    v_message text;
    v_prefix text := CASE WHEN p_row IS NULL THEN 'pgsched: ' ELSE pg_catalog.format('pgsched: row %s of the batch: ', p_row) END;
BEGIN
    IF v_rule IS NULL THEN
        RETURN;
    END IF;
    IF v_rule LIKE '%\_not\_null' THEN
        v_column := pg_catalog.substr(v_rule, 6, pg_catalog.length(v_rule) - 14);
        RAISE EXCEPTION '%column "%" may not be NULL', v_prefix, v_column
            USING ERRCODE = 'not_null_violation', COLUMN = v_column, SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
    v_column := CASE v_rule
        WHEN 'jobs_task_valid' THEN 'task'
        WHEN 'jobs_queue_valid' THEN 'queue'
        WHEN 'jobs_args_is_object' THEN 'args'
        WHEN 'jobs_priority_range' THEN 'priority'
        WHEN 'jobs_run_at_finite' THEN 'run_at'
        WHEN 'jobs_max_attempts_positive' THEN 'max_attempts'
        WHEN 'jobs_max_attempts_range' THEN 'max_attempts'
        WHEN 'jobs_idempotency_key_length' THEN 'idempotency_key'
        WHEN 'jobs_labels_valid' THEN 'labels'
        WHEN 'jobs_tenant_length' THEN 'tenant'
    END;
    v_message := CASE v_rule
        WHEN 'jobs_task_valid' THEN pg_catalog.format(
            'task %s is not a valid task name (1 to 200 of A-Z a-z 0-9 _ . : -, starting with a letter or _)',
            pgsched._shown(p_task))
        WHEN 'jobs_queue_valid' THEN pg_catalog.format(
            'queue %s is not a valid queue name (1 to 63 of A-Z a-z 0-9 _ . : -, not starting with . : -)',
            pgsched._shown(p_queue))
        WHEN 'jobs_args_is_object' THEN pg_catalog.format(
            'args must be a JSON object, not %s %s', pg_catalog.jsonb_typeof(p_args), pgsched._shown(p_args::text))
        WHEN 'jobs_priority_range' THEN pg_catalog.format(
            'priority %s is out of range (-1000000 to 1000000)', p_priority)
        WHEN 'jobs_run_at_finite' THEN pg_catalog.format('run_at %s is not a finite time', p_run_at)
        WHEN 'jobs_max_attempts_positive' THEN pg_catalog.format(
            'max_attempts %s is not allowed: at least 1 (NULL means the default)', p_max_attempts)
        WHEN 'jobs_max_attempts_range' THEN pg_catalog.format(
            'max_attempts %s is out of range (1 to 1000000; NULL means the default)', p_max_attempts)
        WHEN 'jobs_idempotency_key_length' THEN pg_catalog.format(
            'idempotency_key %s is %s bytes long: it must be 1 to 1000 bytes',
            pgsched._shown(p_key), pg_catalog.octet_length(p_key))
        WHEN 'jobs_labels_valid' THEN pg_catalog.format(
            'labels %s may not contain NULL or empty labels (no worker could offer them)',
            pgsched._shown(p_labels::text))
        WHEN 'jobs_tenant_length' THEN pg_catalog.format(
            'tenant %s must be 1 to 200 characters long', pgsched._shown(p_tenant))
    END;
    RAISE EXCEPTION '% (%)', v_prefix || v_message, v_rule
        USING ERRCODE = 'check_violation', CONSTRAINT = v_rule, COLUMN = v_column, SCHEMA = 'pgsched', TABLE = 'jobs';
END
$$;
