-- _hold_shard
-- contract: the fence of every scanner write. Locks the shard's lease row
-- FOR SHARE if, and only if, p_scanner owns it under p_epoch and the lease has
-- not run out; otherwise raises SQLSTATE PS409 and the caller's whole
-- transaction is rolled back. Holding the lock until commit means a takeover
-- (which updates the row) waits for this write to finish, or this write sees
-- the takeover and is rejected: never both. A session confined to a tenant
-- is refused (insufficient_privilege).
CREATE OR REPLACE FUNCTION pgsched._hold_shard(
    p_scanner text,
    p_shard   integer,
    p_epoch   bigint,
    p_now     timestamptz
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_unconfined('run a scanner (scanners act for every tenant)');
    PERFORM 1 FROM pgsched.shard_leases l
    WHERE l.shard = p_shard AND l.owner = p_scanner AND l.epoch = p_epoch AND l.expires_at > p_now
    FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: scanner % no longer holds shard % under epoch %', p_scanner, p_shard, p_epoch
            USING ERRCODE = 'PS409', HINT = 'Another scanner took the shard over; this write was rejected.';
    END IF;
END
$$;
