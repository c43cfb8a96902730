-- tg_jobs__ready_truncate
-- contract: after TRUNCATE of pgsched.jobs, pgsched.ready is emptied too
-- (its rows would name jobs that are gone).
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__ready_truncate()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    TRUNCATE pgsched.ready;
    RETURN NULL;
END
$$;
