-- _cron_value
-- contract: one plain value of cron field p_field (see _cron_field): a number
-- within the field's range, or a month / weekday name where the field takes
-- names. Raises invalid_parameter_value otherwise.
CREATE OR REPLACE FUNCTION pgsched._cron_value(p_value text, p_field integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := (ARRAY['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'])[p_field + 1];
    v_lo integer := (ARRAY[0, 0, 0, 1, 1, 0])[p_field + 1];
    v_hi integer := (ARRAY[59, 59, 23, 31, 12, 7])[p_field + 1];
    v_at integer;
BEGIN
    IF p_field = 4 THEN
        v_at := pg_catalog.array_position('{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}'::text[], p_value);
        IF v_at IS NOT NULL THEN
            RETURN v_at;
        END IF;
    ELSIF p_field = 5 THEN
        v_at := pg_catalog.array_position('{SUN,MON,TUE,WED,THU,FRI,SAT}'::text[], p_value);
        IF v_at IS NOT NULL THEN
            RETURN v_at - 1;
        END IF;
    END IF;
    IF p_value !~ '^[0-9]+$' THEN
        RAISE EXCEPTION 'pgsched: cannot parse % field: % is not a number%', v_name, pg_catalog.quote_literal(p_value),
            CASE p_field WHEN 4 THEN ' or JAN-DEC' WHEN 5 THEN ' or SUN-SAT' ELSE '' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_value::numeric NOT BETWEEN v_lo AND v_hi THEN
        RAISE EXCEPTION 'pgsched: % must be %-%, got %', v_name, v_lo, v_hi, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN p_value::integer;
END
$$;
