-- _check_run_options
-- contract: raises check_violation, naming the rule, the column and the
-- value, when a new job's timeout is not positive or its concurrency_key is
-- not 1 to 200 characters (the rules _run_options_problem names: the
-- table's jobs_timeout_positive and jobs_concurrency_key_length, which would
-- name a partition instead). NULL is allowed for both. p_row, 1-based, is the job's position in a batch and
-- leads the message, as in _check_job.
CREATE OR REPLACE FUNCTION pgsched._check_run_options(
    p_timeout interval, p_concurrency_key text, p_row bigint DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_rule text := pgsched._run_options_problem(p_timeout, p_concurrency_key);
    v_prefix text := CASE WHEN p_row IS NULL THEN 'pgsched: ' ELSE pg_catalog.format('pgsched: row %s of the batch: ', p_row) END;
BEGIN
    IF v_rule = 'jobs_timeout_positive' THEN
        RAISE EXCEPTION '%timeout % is not allowed: it must be positive (NULL means none)', v_prefix, p_timeout
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_timeout_positive', COLUMN = 'timeout',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
    IF v_rule = 'jobs_concurrency_key_length' THEN
        RAISE EXCEPTION '%concurrency_key % is not allowed: it must be 1 to 200 characters (NULL means none)',
                v_prefix, pgsched._shown(p_concurrency_key)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_concurrency_key_length', COLUMN = 'concurrency_key',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
END
$$;
