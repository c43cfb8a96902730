-- _home_shard
-- contract: the shard of a job without an idempotency key. Every job one
-- session enqueues within one second gets the same one; the next second the
-- next one; two sessions start from different ones. Jobs enqueued together
-- are claimed together, so a claim, its start() and its complete() find
-- their jobs in one or two partitions instead of in all of them (each
-- partition a statement touches costs it its indexes, triggers and checks
-- once more); concurrent producers still spread over the shards. p_shards:
-- the installed number (pgsched.config.shards). A plain expression, so that
-- PL/pgSQL evaluates it without a query.
CREATE OR REPLACE FUNCTION pgsched._home_shard(p_shards integer)
RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT ((pg_catalog.pg_backend_pid()::bigint
             + pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.now()))::bigint)
            % p_shards)::smallint
$$;
