-- _check_labels
-- contract: raises check_violation, naming the constraint jobs_labels_valid,
-- when a job's labels contain NULL or an empty label (no worker could ever
-- offer it, so the job would wait forever). Jobs are checked by _check_job,
-- which applies the same rule; this one serves callers that hold only labels.
CREATE OR REPLACE FUNCTION pgsched._check_labels(p_labels text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF pg_catalog.array_position(p_labels, NULL) IS NOT NULL OR pg_catalog.array_position(p_labels, '') IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: labels % may not contain NULL or empty labels (jobs_labels_valid)',
                pgsched._shown(p_labels::text)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_labels_valid', COLUMN = 'labels',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
END
$$;
