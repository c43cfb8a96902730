-- _rebuild_ready
-- contract: fills pgsched.ready again from pgsched.jobs after a crash or a
-- standby's promotion emptied its unlogged slots (pgsched.ready_intact
-- empty): every available job without its row gets one in the open slot,
-- the ring is marked intact, and each queue that got rows is announced on
-- pgsched_jobs so idle workers claim them. One caller at a time (the others
-- wait, then find the ring intact); returns the rows added, NULL when the
-- ring was intact. Rows of jobs made available meanwhile by their own
-- statements are not added twice; a claim ignores a stale row anyway.
CREATE OR REPLACE FUNCTION pgsched._rebuild_ready()
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
-- claim() and rotate_ready() run under short lock timeouts: the first
-- caller may take as long as the backlog needs, the others wait for it.
SET lock_timeout = 0
AS $$
DECLARE
    v_slot smallint;
    v_added bigint;
    v_queues text[];
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgsched.ready_intact'));
    IF EXISTS (SELECT FROM pgsched.ready_intact) THEN
        RETURN NULL;
    END IF;
    v_slot := pgsched._ready_slot();
    WITH added AS (
        INSERT INTO pgsched.ready
            (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels, tenant,
             concurrency_key)
        SELECT v_slot, j.queue, j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id, j.shard, j.priority,
               j.labels, j.tenant, j.concurrency_key
        FROM pgsched.jobs j
        WHERE j.state = 'available'
          AND NOT EXISTS (SELECT FROM pgsched.ready r WHERE r.id = j.id AND r.shard = j.shard)
        RETURNING queue
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT a.queue) INTO v_added, v_queues
    FROM added a;
    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    INSERT INTO pgsched.ready_intact DEFAULT VALUES;
    RAISE LOG 'pgsched: the ring of due jobs was empty after a restart or promotion; % rows added from pgsched.jobs',
        v_added;
    RETURN v_added;
END
$$;
