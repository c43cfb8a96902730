-- _check_payload
-- contract: raises check_violation, naming the constraint
-- jobs_args_size_limit, when a job's args are larger than p_limit bytes
-- (pgsched.config.max_payload_bytes), measured as compact JSON text in UTF-8
-- (no whitespace between tokens: what json.dumps(args, separators=(",", ":"),
-- ensure_ascii=False) writes), so a client's exact count holds at the
-- boundary. p_row, 1-based, numbers the row in a batch.
CREATE OR REPLACE FUNCTION pgsched._check_payload(p_args jsonb, p_limit integer, p_row bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_text text;
    v_size integer;
    v_bare text;
BEGIN
    -- The text form is at most 6 bytes per stored byte (a \u0001 escape): well below, skip measuring.
    IF p_args IS NULL OR pg_catalog.pg_column_size(p_args) <= p_limit / 6 THEN
        RETURN;
    END IF;
    v_text := p_args::text;
    v_size := pg_catalog.octet_length(v_text);
    IF v_size > p_limit THEN
        -- jsonb's text form adds one space after every , and : between
        -- tokens and none elsewhere outside strings: drop the strings, count
        -- the spaces left. Paid only by args near or over the limit.
        v_bare := pg_catalog.regexp_replace(v_text, '"(?:[^"\\]|\\.)*"', '', 'g');
        v_size := v_size - (pg_catalog.length(v_bare) - pg_catalog.length(pg_catalog.replace(v_bare, ' ', '')));
    END IF;
    IF v_size > p_limit THEN
        RAISE EXCEPTION 'pgsched: %args are % bytes of JSON, over the limit of % bytes (jobs_args_size_limit)',
                CASE WHEN p_row IS NULL THEN '' ELSE pg_catalog.format('row %s of the batch: ', p_row) END,
                v_size, p_limit
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_args_size_limit', COLUMN = 'args',
                  SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'Store large data elsewhere and pass a reference, or raise pgsched.config.max_payload_bytes.';
    END IF;
END
$$;
