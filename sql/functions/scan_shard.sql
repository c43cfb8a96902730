-- scan_shard
-- contract: one scanner pass over one shard it holds (fenced by owner and
-- epoch, see _hold_shard): expires dead workers' leases, promotes due jobs
-- (waking workers), and says when the shard's next scheduled job is due so the
-- scanner can sleep until exactly then: an occurrence still waiting after
-- promotion (for the previous run of its schedule) is looked at again a
-- second later. Raises PS409 when the lease is gone.
CREATE OR REPLACE FUNCTION pgsched.scan_shard(
    scanner text,
    shard   integer,
    epoch   bigint,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (expired integer, promoted integer, next_due timestamptz, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_expired integer;
    v_promoted integer;
    v_next timestamptz;
BEGIN
    PERFORM pgsched._hold_shard(scan_shard.scanner, scan_shard.shard, scan_shard.epoch, v_now);
    -- p_now itself (checked above; NULL means the same transaction clock).
    v_expired := pgsched.expire_leases(scan_shard.p_now, 1000, scan_shard.shard);
    v_promoted := pgsched.promote_due(scan_shard.p_now, 10000, scan_shard.shard);
    v_next := pgsched.next_due(scan_shard.shard);
    IF v_promoted < 10000 AND v_next <= v_now THEN
        v_next := v_now + interval '1 second';
    END IF;
    RETURN QUERY SELECT v_expired, v_promoted, v_next, pg_catalog.clock_timestamp();
END
$$;
