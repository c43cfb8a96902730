-- _plan_for_size
-- contract: for start() and complete(), which run one generic plan sized for
-- a worker's batch of a few jobs: a call of more than 200 jobs plans its
-- statements for its own size instead (under the generic plan its joins
-- would pass over the whole batch for each of its jobs). The setting lasts
-- until the calling function returns (its own SET plan_cache_mode restores
-- it); so this function has no SET clause of its own.
CREATE OR REPLACE FUNCTION pgsched._plan_for_size(p_jobs integer)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_jobs > 200 THEN
        PERFORM pg_catalog.set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
END
$$;
