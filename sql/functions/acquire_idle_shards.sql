-- acquire_idle_shards
-- contract: the shard leases of a worker that expands schedules while no
-- scanner does (`pgsched worker` alone fires schedules). While no scanner is
-- live (none seen within `lease`), renews the leases `holder` has and takes
-- every shard nobody holds (free or expired), raising its epoch, exactly as
-- acquire_shards does; writes go through the same fence (_hold_shard). As soon
-- as a scanner is live it gives all of them back, so scanners take over at
-- their next renewal. Unlike a scanner, the holder is not recorded in
-- pgsched.scanners: it never counts in the scanners' fair shares. Returns the
-- shards held afterwards with their epochs and expiry.
CREATE OR REPLACE FUNCTION pgsched.acquire_idle_shards(
    holder text,
    lease  interval    DEFAULT '10 seconds',
    p_now  timestamptz DEFAULT NULL
)
RETURNS TABLE (shard smallint, epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
BEGIN
    IF acquire_idle_shards.lease IS NULL OR acquire_idle_shards.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: the lease must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF acquire_idle_shards.holder IS NULL
       OR EXISTS (SELECT 1 FROM pgsched.scanners s WHERE s.name = acquire_idle_shards.holder) THEN
        RAISE EXCEPTION 'pgsched: % is a scanner name; idle shards are held under another name',
            coalesce(acquire_idle_shards.holder, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF EXISTS (SELECT 1 FROM pgsched.scanners s WHERE s.last_seen > v_now - acquire_idle_shards.lease) THEN
        UPDATE pgsched.shard_leases l
        SET owner = NULL, expires_at = NULL, renewed_at = v_now
        WHERE l.owner = acquire_idle_shards.holder;
        RETURN;
    END IF;

    UPDATE pgsched.shard_leases l
    SET expires_at = v_now + acquire_idle_shards.lease, renewed_at = v_now,
        epoch = CASE WHEN l.expires_at > v_now THEN l.epoch ELSE l.epoch + 1 END
    WHERE l.owner = acquire_idle_shards.holder;

    UPDATE pgsched.shard_leases l
    SET owner = acquire_idle_shards.holder, epoch = l.epoch + 1,
        expires_at = v_now + acquire_idle_shards.lease, renewed_at = v_now
    WHERE l.shard IN (
        SELECT l2.shard FROM pgsched.shard_leases l2
        WHERE l2.owner IS NULL OR l2.expires_at <= v_now
        ORDER BY l2.shard
        FOR UPDATE SKIP LOCKED);

    RETURN QUERY
    SELECT l.shard, l.epoch, l.expires_at
    FROM pgsched.shard_leases l
    WHERE l.owner = acquire_idle_shards.holder
    ORDER BY l.shard;
END
$$;
