-- tg_jobs__ready_rows
-- contract: after each INSERT statement into pgsched.jobs, the due jobs it
-- wrote (state 'available') enter pgsched.ready, in the open slot of the
-- ring: one INSERT for the whole statement, whoever wrote the rows (the
-- enqueue functions, retry, the scanners' occurrences, a plain INSERT). Rows
-- that are not due enter pgsched.ready when they become due
-- (tg_jobs__ready_row).
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__ready_rows()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_slot smallint := pgsched._ready_slot();  -- once for the statement's rows
BEGIN
    INSERT INTO pgsched.ready
        (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels, tenant, concurrency_key)
    SELECT v_slot,
           n.queue, n.dispatch_group, n.dispatch_rank, n.dispatch_at, n.id, n.shard, n.priority, n.labels, n.tenant,
           n.concurrency_key
    FROM new_jobs n
    WHERE n.state = 'available';
    RETURN NULL;
END
$$;
