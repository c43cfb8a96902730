-- _ensure_day_partition
-- contract: makes sure p_parent (job_history, job_events or queue_minutes) has a partition
-- for the UTC day p_day. Rows that landed in the default partition for that
-- day (written while the partition was missing) are moved into the new one
-- before it is attached, so nothing is lost and the attach cannot fail on
-- them. Returns true when it created a partition.
CREATE OR REPLACE FUNCTION pgsched._ensure_day_partition(p_parent text, p_day date)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_name text := p_parent || '_p' || pg_catalog.to_char(p_day, 'YYYYMMDD');
    v_key text := CASE p_parent WHEN 'job_history' THEN 'finished_at' WHEN 'job_events' THEN 'at'
                                WHEN 'queue_minutes' THEN 'minute' END;
    v_from timestamptz := (p_day::timestamp AT TIME ZONE 'UTC');
    v_to timestamptz := ((p_day + 1)::timestamp AT TIME ZONE 'UTC');
BEGIN
    IF v_key IS NULL THEN
        RAISE EXCEPTION 'pgsched: % is not a day-partitioned table', p_parent USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.to_regclass(pg_catalog.format('pgsched.%I', v_name)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE TABLE pgsched.%I (LIKE pgsched.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_name, p_parent);
    -- No row may reach the default partition between the move and the attach.
    EXECUTE pg_catalog.format('LOCK TABLE pgsched.%I IN SHARE MODE', p_parent || '_default');
    EXECUTE pg_catalog.format(
        'WITH moved AS (DELETE FROM pgsched.%I WHERE %I >= $1 AND %I < $2 RETURNING *) '
        'INSERT INTO pgsched.%I SELECT * FROM moved',
        p_parent || '_default', v_key, v_key, v_name) USING v_from, v_to;
    EXECUTE pg_catalog.format(
        'ALTER TABLE pgsched.%I ATTACH PARTITION pgsched.%I FOR VALUES FROM (%L) TO (%L)',
        p_parent, v_name, v_from, v_to);
    RETURN true;
END
$$;
