-- _random_shard
-- contract: a shard chosen uniformly at random, for jobs without an
-- idempotency key.
CREATE OR REPLACE FUNCTION pgsched._random_shard()
RETURNS smallint
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    RETURN (SELECT pg_catalog.floor(pg_catalog.random() * c.shards)::smallint FROM pgsched.config c);
END
$$;
