-- _check_payload
-- contract: raises check_violation, naming the constraint
-- jobs_args_size_limit, when a job's args are larger than p_limit bytes
-- (pgsched.config.max_payload_bytes). p_row numbers the row in a batch.
CREATE OR REPLACE FUNCTION pgsched._check_payload(p_args jsonb, p_limit integer, p_row bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_size integer;
BEGIN
    -- The text form is at most 6 bytes per stored byte (a \u0001 escape): well below, skip measuring.
    IF p_args IS NULL OR pg_catalog.pg_column_size(p_args) <= p_limit / 6 THEN
        RETURN;
    END IF;
    v_size := pg_catalog.octet_length(p_args::text);
    IF v_size > p_limit THEN
        RAISE EXCEPTION 'pgsched: job args are % bytes, over the limit of % bytes%', v_size, p_limit,
                CASE WHEN p_row IS NULL THEN '' ELSE pg_catalog.format(' (row %s of the batch)', p_row) END
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_args_size_limit',
                  SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'Store large data elsewhere and pass a reference, or raise pgsched.config.max_payload_bytes.';
    END IF;
END
$$;
