-- 0002 down: workers no longer vacuum the shard partitions themselves.
DO $$
BEGIN
    IF pg_catalog.current_setting('server_version_num')::integer >= 170000 THEN
        EXECUTE (
            SELECT pg_catalog.string_agg(
                pg_catalog.format('REVOKE MAINTAIN ON %s FROM pgsched_worker', i.inhrelid::pg_catalog.regclass), '; ')
            FROM pg_catalog.pg_inherits i
            WHERE i.inhparent = 'pgsched.jobs'::pg_catalog.regclass);
    END IF;
END
$$;
DROP FUNCTION pgsched.vacuum_candidates(bigint, double precision);
