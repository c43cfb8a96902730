-- release_shards
-- contract: a scanner shutting down gives its shards back at once (so others
-- need not wait for the lease to lapse) and leaves the scanner registry.
-- Returns how many shards it released.
CREATE OR REPLACE FUNCTION pgsched.release_shards(scanner text)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    UPDATE pgsched.shard_leases l
    SET owner = NULL, expires_at = NULL, renewed_at = pg_catalog.now()
    WHERE l.owner = release_shards.scanner;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    DELETE FROM pgsched.scanners s WHERE s.name = release_shards.scanner;
    RETURN v_count;
END
$$;
