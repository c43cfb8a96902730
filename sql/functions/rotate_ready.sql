-- rotate_ready
-- contract: turns the ring of pgsched.ready (10_tables.sql) and empties its
-- drained slots, so that claims read the dead entries of the last second or
-- two only, however long something pins the xmin horizon. Returns what it
-- did: one row per slot it opened ('opened'), emptied ('emptied', rows moved
-- to the open slot in moved) or had to leave ('busy': a lock it could not
-- take at once; 'kept': more than p_move due jobs still in it).
--   - The open slot has been open p_period: the next slot of the ring that is
--     empty opens (none empty: the open one stays open).
--   - A closed slot that holds pages is emptied (at once when none of its
--     jobs is still due, else once it was closed p_period ago): under
--     an ACCESS EXCLUSIVE lock taken within lock_timeout (claims wait for it
--     a few milliseconds at most; held: tried again at the next call), its
--     due jobs that are still there (at most p_move: the tail of a backlog,
--     a paused queue, labels no worker offers) move to the open slot, rows whose job
--     is no longer due are dropped, and TRUNCATE gives its files back whole:
--     no vacuum, and no xmin horizon, is needed for that.
-- First, if a crash or a promotion emptied the ring (its slots are
-- unlogged), it is filled again from pgsched.jobs (_rebuild_ready).
-- Callers at the same time do not wait for each other: the one that gets the
-- ring's advisory lock works, the others return nothing. Workers and
-- scanners call it every second (pgsched/runtime/vacuumer.py).
CREATE OR REPLACE FUNCTION pgsched.rotate_ready(
    p_period interval DEFAULT interval '1 second',
    p_move   integer  DEFAULT 1000
)
RETURNS TABLE (slot smallint, action text, moved bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
SET lock_timeout = '20ms'
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_open pgsched.ready_ring;
    v_next smallint;
    v_slot smallint;
    v_rel regclass;
    v_live bigint;
    v_moved bigint;
    v_settled boolean;
BEGIN
    IF p_period IS NULL OR p_period <= interval '0' OR p_move IS NULL OR p_move < 0 THEN
        RAISE EXCEPTION 'pgsched: rotate_ready needs p_period > 0 and p_move >= 0 (got %, %)', p_period, p_move
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- After a crash or a promotion emptied the unlogged ring, fill it again
    -- (workers call this every second, whether or not they claim).
    IF NOT EXISTS (SELECT FROM pgsched.ready_intact) THEN
        PERFORM pgsched._rebuild_ready();
    END IF;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgsched.ready_ring')) THEN
        RETURN;
    END IF;
    -- The ring's rows emptied by hand (every slot closed, or none there): slot 0, where rows then go, is open.
    INSERT INTO pgsched.ready_ring AS g (slot, opened_at, closed_at)
    SELECT s, v_now, v_now FROM pg_catalog.generate_series(0, 7) s
    ON CONFLICT (slot) DO NOTHING;
    SELECT * INTO v_open FROM pgsched.ready_ring g WHERE g.closed_at IS NULL;
    IF NOT FOUND THEN
        UPDATE pgsched.ready_ring g SET opened_at = v_now, closed_at = NULL WHERE g.slot = 0
        RETURNING * INTO v_open;
    END IF;

    -- Empty the closed slots, oldest first: at once when all their jobs
    -- were claimed (their dead entries are what every claim steps over
    -- while the horizon is held), and those that still hold due jobs once
    -- they were closed p_period ago (by then moving them is worth it).
    FOR v_slot, v_settled IN
        SELECT g.slot, g.closed_at <= v_now - p_period FROM pgsched.ready_ring g
        WHERE g.closed_at IS NOT NULL
          AND pg_catalog.pg_relation_size(pg_catalog.format('pgsched.ready_s%s', g.slot)::regclass) > 0
        ORDER BY g.closed_at
    LOOP
        v_rel := pg_catalog.format('pgsched.ready_s%s', v_slot)::regclass;
        -- Counted before the lock too: a slot kept for its backlog costs no lock.
        EXECUTE pg_catalog.format('SELECT pg_catalog.count(*) FROM (SELECT FROM %s LIMIT %s) x', v_rel, p_move + 1)
            INTO v_live;
        IF v_live > 0 AND NOT v_settled THEN
            CONTINUE;
        END IF;
        IF v_live > p_move THEN
            RETURN QUERY SELECT v_slot, 'kept'::text, v_live;
            CONTINUE;
        END IF;
        BEGIN
            EXECUTE pg_catalog.format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_rel);
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT v_slot, 'busy'::text, NULL::bigint;
            CONTINUE;
        END;
        EXECUTE pg_catalog.format('SELECT pg_catalog.count(*) FROM (SELECT FROM %s LIMIT %s) x', v_rel, p_move + 1)
            INTO v_live;
        IF v_live > 0 AND NOT v_settled THEN
            CONTINUE;
        END IF;
        IF v_live > p_move THEN
            RETURN QUERY SELECT v_slot, 'kept'::text, v_live;
            CONTINUE;
        END IF;
        v_moved := 0;
        IF v_live > 0 THEN
            -- Still due and still where the row says: into the open slot.
            EXECUTE pg_catalog.format($sql$
                WITH moved AS (
                    INSERT INTO pgsched.ready
                        (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels, tenant,
                         concurrency_key)
                    SELECT $1, r.queue, r.dispatch_group, r.dispatch_rank, r.dispatch_at, r.id, r.shard, r.priority,
                           r.labels, r.tenant, r.concurrency_key
                    FROM %s r
                    JOIN pgsched.jobs j ON j.id = r.id AND j.shard = r.shard
                    WHERE j.state = 'available' AND j.queue = r.queue AND j.dispatch_group = r.dispatch_group
                      AND j.dispatch_rank = r.dispatch_rank AND j.dispatch_at = r.dispatch_at
                    RETURNING 1
                )
                SELECT pg_catalog.count(*) FROM moved
            $sql$, v_rel) INTO v_moved USING v_open.slot;
        END IF;
        EXECUTE pg_catalog.format('TRUNCATE %s', v_rel);
        RETURN QUERY SELECT v_slot, 'emptied'::text, v_moved;
    END LOOP;

    -- Open the next empty slot once the open one has had its turn.
    IF v_open.opened_at <= v_now - p_period THEN
        SELECT g.slot INTO v_next FROM pgsched.ready_ring g
        WHERE g.slot <> v_open.slot
          AND pg_catalog.pg_relation_size(pg_catalog.format('pgsched.ready_s%s', g.slot)::regclass) = 0
        ORDER BY (g.slot - v_open.slot + 8) % 8
        LIMIT 1;
        IF v_next IS NOT NULL THEN
            UPDATE pgsched.ready_ring g SET closed_at = v_now WHERE g.slot = v_open.slot;
            UPDATE pgsched.ready_ring g SET opened_at = v_now, closed_at = NULL WHERE g.slot = v_next;
            RETURN QUERY SELECT v_next, 'opened'::text, NULL::bigint;
        END IF;
    END IF;
END
$$;
