-- tg_config__before_update
-- contract: the shard count is fixed at install (the partitions of
-- pgsched.jobs and the shard leases were made for it): an UPDATE that
-- changes it is refused, for every role. The other settings are kept valid
-- by the table's CHECK constraints.
CREATE OR REPLACE FUNCTION pgsched.tg_config__before_update()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF NEW.shards IS DISTINCT FROM OLD.shards OR NEW.singleton IS DISTINCT FROM OLD.singleton THEN
        RAISE EXCEPTION 'pgsched: the shard count is fixed at install (% shards)', OLD.shards
            USING ERRCODE = 'feature_not_supported', SCHEMA = 'pgsched', TABLE = 'config', COLUMN = 'shards',
                  HINT = 'Install into a new database with pgsched migrate --shards N and move the jobs.';
    END IF;
    RETURN NEW;
END
$$;
