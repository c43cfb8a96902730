-- _check_trace_context
-- contract: raises check_violation, naming the rule jobs_trace_context_valid
-- and the column trace_context, unless a job's trace context is NULL or a
-- JSON object of at most 8 KiB as text (the caller's trace propagation
-- headers, docs/otel.md). Run once per writing statement by enqueue(),
-- enqueue_many() and the insert trigger.
CREATE OR REPLACE FUNCTION pgsched._check_trace_context(p_trace_context jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_trace_context IS NOT NULL AND (pg_catalog.jsonb_typeof(p_trace_context) <> 'object'
                                        OR pg_catalog.octet_length(p_trace_context::text) > 8192) THEN
        RAISE EXCEPTION 'pgsched: trace_context must be a JSON object of at most 8192 bytes, not a % of % bytes (jobs_trace_context_valid)',
                pg_catalog.jsonb_typeof(p_trace_context), pg_catalog.octet_length(p_trace_context::text)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_trace_context_valid', COLUMN = 'trace_context',
                  SCHEMA = 'pgsched', TABLE = 'jobs';
    END IF;
END
$$;
