-- acquire_shards
-- contract: a scanner's tick for its shard leases. Records the scanner as
-- live, renews the leases it holds, gives back shards beyond its fair share
-- (shards / live scanners, rounded up) so newcomers get theirs, and takes
-- free or expired shards up to that share. Taking a shard raises its epoch;
-- renewing keeps it; a lease that lapsed before renewal is re-taken with a
-- new epoch, so writes prepared under the old one are rejected. Returns the
-- shards held afterwards with their epochs and expiry.
CREATE OR REPLACE FUNCTION pgsched.acquire_shards(
    scanner text,
    lease   interval    DEFAULT '10 seconds',
    host    text        DEFAULT NULL,
    pid     integer     DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (shard smallint, epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_shards integer;
    v_live integer;
    v_share integer;
    v_mine integer;
BEGIN
    PERFORM pgsched._check_unconfined('run a scanner (scanners act for every tenant)');
    IF acquire_shards.lease IS NULL OR acquire_shards.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: the scanner lease must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.scanners AS s (name, host, pid, started_at, last_seen)
    VALUES (acquire_shards.scanner, acquire_shards.host, acquire_shards.pid, v_now, v_now)
    ON CONFLICT (name) DO UPDATE SET last_seen = v_now;

    SELECT c.shards INTO v_shards FROM pgsched.config c;
    SELECT pg_catalog.count(*) INTO v_live
    FROM pgsched.scanners s WHERE s.last_seen > v_now - acquire_shards.lease;
    v_share := (v_shards + greatest(v_live, 1) - 1) / greatest(v_live, 1);

    -- Renew what is still ours; a lapsed lease of ours comes back with a new epoch.
    UPDATE pgsched.shard_leases l
    SET expires_at = v_now + acquire_shards.lease, renewed_at = v_now,
        epoch = CASE WHEN l.expires_at > v_now THEN l.epoch ELSE l.epoch + 1 END
    WHERE l.owner = acquire_shards.scanner;

    SELECT pg_catalog.count(*) INTO v_mine FROM pgsched.shard_leases l WHERE l.owner = acquire_shards.scanner;
    IF v_mine > v_share THEN
        UPDATE pgsched.shard_leases l
        SET owner = NULL, expires_at = NULL, renewed_at = v_now
        WHERE l.shard IN (
            SELECT l2.shard FROM pgsched.shard_leases l2
            WHERE l2.owner = acquire_shards.scanner
            ORDER BY l2.shard DESC
            LIMIT v_mine - v_share);
    ELSIF v_mine < v_share THEN
        UPDATE pgsched.shard_leases l
        SET owner = acquire_shards.scanner, epoch = l.epoch + 1,
            expires_at = v_now + acquire_shards.lease, renewed_at = v_now
        WHERE l.shard IN (
            SELECT l2.shard FROM pgsched.shard_leases l2
            WHERE l2.owner IS NULL OR l2.expires_at <= v_now
            ORDER BY l2.shard
            LIMIT v_share - v_mine
            FOR UPDATE SKIP LOCKED);
    END IF;

    RETURN QUERY
    SELECT l.shard, l.epoch, l.expires_at
    FROM pgsched.shard_leases l
    WHERE l.owner = acquire_shards.scanner
    ORDER BY l.shard;
END
$$;
