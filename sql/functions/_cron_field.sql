-- _cron_field
-- contract: the values one field of a cron expression names, parsed by the
-- rules cron.py applies (cronsim's): '*', numbers, ranges 'a-b', steps '/n',
-- lists, JAN-DEC in the month field, SUN-SAT and 'nL' / 'd#n' in the
-- day-of-week field, 'L' and 'LW' in the day-of-month field (-1000 / -1001).
-- p_field is 0 second, 1 minute, 2 hour, 3 day-of-month, 4 month,
-- 5 day-of-week. Raises invalid_parameter_value naming the field and what is
-- wrong, so SQL refuses exactly what the Python side cannot parse.
CREATE OR REPLACE FUNCTION pgsched._cron_field(p_token text, p_field integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := (ARRAY['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'])[p_field + 1];
    v_lo integer := (ARRAY[0, 0, 0, 1, 1, 0])[p_field + 1];
    v_hi integer := (ARRAY[59, 59, 23, 31, 12, 7])[p_field + 1];
    v_token text := pg_catalog.upper(p_token);
    v_term text;
    v_rest text;
    v_step integer;
    v_items integer[] := '{}';
    v_first integer;
    v_last integer;
BEGIN
    IF v_token = '*' THEN
        RETURN ARRAY(SELECT pg_catalog.generate_series(v_lo, v_hi));
    END IF;
    IF pg_catalog.strpos(v_token, ',') > 0 THEN
        FOREACH v_term IN ARRAY pg_catalog.string_to_array(v_token, ',') LOOP
            v_items := v_items || pgsched._cron_field(v_term, p_field);
        END LOOP;
        RETURN v_items;
    END IF;
    IF p_field = 5 AND pg_catalog.strpos(v_token, 'L') > 0 THEN
        v_term := pg_catalog.left(v_token, -1);
        IF v_term !~ '^[0-9]+$' THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: "nL" (the last such weekday) takes a day number',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY[pgsched._cron_value(v_term, p_field)];
    END IF;
    IF p_field = 5 AND pg_catalog.strpos(v_token, '#') > 0 THEN
        v_term := pg_catalog.split_part(v_token, '#', 1);
        v_rest := pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '#') + 1);
        IF v_rest !~ '^[0-9]+$' OR v_rest::numeric NOT BETWEEN 1 AND 5 THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: "d#n" takes n from 1 to 5',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY[pgsched._cron_value(v_term, p_field)];
    END IF;
    IF pg_catalog.strpos(v_token, '/') > 0 THEN
        v_term := pg_catalog.split_part(v_token, '/', 1);
        v_rest := pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '/') + 1);
        IF v_rest !~ '^[0-9]+$' OR v_rest::numeric = 0 OR v_rest::numeric > 1000000 THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: the step after / must be a positive number',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_step := v_rest::integer;
        v_items := pgsched._cron_field(v_term, p_field);
        IF v_items IN (ARRAY[-1000], ARRAY[-1001]) THEN
            RETURN v_items;
        END IF;
        IF pg_catalog.cardinality(v_items) = 1 THEN
            RETURN ARRAY(SELECT pg_catalog.generate_series(v_items[1], v_hi, v_step));
        END IF;
        RETURN ARRAY(SELECT d.v FROM (SELECT u.v, pg_catalog.row_number() OVER (ORDER BY u.v) AS n
                                      FROM (SELECT DISTINCT x AS v FROM pg_catalog.unnest(v_items) x) u) d
                     WHERE (d.n - 1) % v_step = 0 ORDER BY d.v);
    END IF;
    IF pg_catalog.strpos(v_token, '-') > 0 THEN
        v_first := pgsched._cron_value(pg_catalog.split_part(v_token, '-', 1), p_field);
        v_last := pgsched._cron_value(pg_catalog.substr(v_token, pg_catalog.strpos(v_token, '-') + 1), p_field);
        IF v_last < v_first THEN
            RAISE EXCEPTION 'pgsched: cannot parse % field %: a range goes from low to high',
                v_name, pg_catalog.quote_literal(p_token) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN ARRAY(SELECT pg_catalog.generate_series(v_first, v_last));
    END IF;
    IF p_field = 3 AND v_token = 'LW' THEN
        RETURN ARRAY[-1001];
    END IF;
    IF p_field = 3 AND v_token = 'L' THEN
        RETURN ARRAY[-1000];
    END IF;
    RETURN ARRAY[pgsched._cron_value(v_token, p_field)];
END
$$;
