-- resume_queue
-- contract: lets workers claim from a paused queue again and wakes them.
-- Returns whether the queue had been paused. Refused for a session confined
-- to a tenant.
CREATE OR REPLACE FUNCTION pgsched.resume_queue(queue text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_unconfined('resume a queue (queues are shared by every tenant)');
    UPDATE pgsched.queues q SET paused = false, updated_at = pg_catalog.now()
    WHERE q.name = resume_queue.queue AND q.paused;
    IF FOUND THEN
        PERFORM pg_catalog.pg_notify('pgsched_jobs', resume_queue.queue);
        RETURN true;
    END IF;
    RETURN false;
END
$$;
