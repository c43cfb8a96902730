-- _shard_for_key
-- contract: the shard of a job with this idempotency key; stable for a given
-- key and shard count, so a key always lands on the same shard.
CREATE OR REPLACE FUNCTION pgsched._shard_for_key(p_key text)
RETURNS smallint
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_key IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT ((pg_catalog.hashtextextended(p_key, 0) % c.shards + c.shards) % c.shards)::smallint
            FROM pgsched.config c);
END
$$;
