-- _check_labels
-- contract: raises check_violation, naming the constraint jobs_labels_valid,
-- when a job's labels contain NULL (no worker could ever offer it, so the job
-- would wait forever).
CREATE OR REPLACE FUNCTION pgsched._check_labels(p_labels text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_labels IS NOT NULL AND pg_catalog.array_position(p_labels, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: job labels may not contain NULL (jobs_labels_valid)'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_labels_valid', SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
END
$$;
