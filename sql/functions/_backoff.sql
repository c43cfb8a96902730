-- _backoff
-- contract: the delay before retry number p_attempt + 1 of a job of p_task in
-- p_queue: exponential from base, capped at max, minus up to `jitter` of it
-- at random so retries of a burst spread out. The task's policy wins over the
-- queue's, which wins over the install default; the task policy of the
-- job's tenant (p_tenant) wins over the one every tenant shares.
CREATE OR REPLACE FUNCTION pgsched._backoff(p_task text, p_queue text, p_attempt integer, p_tenant text)
RETURNS interval
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    RETURN (
        SELECT least(p.max, p.base * pg_catalog.power(2, least(greatest(p_attempt, 1) - 1, 40)))
               * (1 - p.jitter * pg_catalog.random())
        FROM (
            SELECT coalesce(t.backoff_base, q.backoff_base, c.backoff_base) AS base,
                   coalesce(t.backoff_max, q.backoff_max, c.backoff_max) AS max,
                   coalesce(t.backoff_jitter, c.backoff_jitter)::double precision AS jitter
            FROM pgsched.config c
            LEFT JOIN LATERAL (SELECT t1.* FROM pgsched.tasks t1
                               WHERE t1.name = p_task AND (t1.tenant IS NULL OR t1.tenant = p_tenant)
                               ORDER BY t1.tenant NULLS LAST LIMIT 1) t ON true
            LEFT JOIN pgsched.queues q ON q.name = p_queue
        ) p);
END
$$;
