-- pause_queue
-- contract: stops claims from a queue (jobs can still be enqueued) until
-- resume_queue(); takes effect at each worker's next claim. Returns true.
-- Refused for a session confined to a tenant.
CREATE OR REPLACE FUNCTION pgsched.pause_queue(queue text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT pgsched._check_unconfined('pause a queue (queues are shared by every tenant)');
    INSERT INTO pgsched.queues AS q (name, paused, updated_at)
    VALUES (pause_queue.queue, true, pg_catalog.now())
    ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = EXCLUDED.updated_at
    RETURNING true
$$;
