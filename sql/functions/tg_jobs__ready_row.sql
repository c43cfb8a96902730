-- tg_jobs__ready_row
-- contract: keeps pgsched.ready one row per due job when a job of
-- pgsched.jobs becomes due, stops being due other than by a claim, or
-- changes its place in the claim order (queue, dispatch stamps, labels,
-- tenant, key) while due: the old row leaves, found by its claim-order key,
-- and the new one enters the open slot. Claims remove their jobs' rows
-- themselves, and the trigger's WHEN (30_triggers.sql) leaves every other
-- update (heartbeats, starts, completions' deletes) alone.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__ready_row()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF OLD.state = 'available' THEN
        DELETE FROM pgsched.ready r
        WHERE r.queue = OLD.queue AND r.dispatch_group = OLD.dispatch_group AND r.dispatch_rank = OLD.dispatch_rank
          AND r.dispatch_at = OLD.dispatch_at AND r.id = OLD.id;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.state = 'available' THEN
        INSERT INTO pgsched.ready
            (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels, tenant,
             concurrency_key)
        VALUES (pgsched._ready_slot(),
                NEW.queue, NEW.dispatch_group, NEW.dispatch_rank, NEW.dispatch_at, NEW.id, NEW.shard, NEW.priority,
                NEW.labels, NEW.tenant, NEW.concurrency_key);
    END IF;
    RETURN NULL;
END
$$;
