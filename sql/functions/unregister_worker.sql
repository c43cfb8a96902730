-- unregister_worker
-- contract: forgets a worker that exits cleanly.
CREATE OR REPLACE FUNCTION pgsched.unregister_worker(name text)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    DELETE FROM pgsched.workers w WHERE w.name = unregister_worker.name
$$;
