-- tg_jobs__ready_truncate
-- contract: after TRUNCATE of pgsched.jobs, pgsched.ready is emptied too
-- (its rows would name jobs that are gone). When the same statement
-- truncates pgsched.ready as well (pgsched.testing's clean names every
-- table), it cannot be truncated again from here: its rows, if any are
-- left, are deleted.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__ready_truncate()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    BEGIN
        TRUNCATE pgsched.ready;
    EXCEPTION WHEN object_in_use THEN
        DELETE FROM pgsched.ready;
    END;
    RETURN NULL;
END
$$;
