-- pgsched: creates what depends on the install-time shard count, the default
-- partitions that catch any row whose day partition is missing, and today's
-- day partitions.
DO $$
DECLARE
    v_shards integer;
BEGIN
    SELECT c.shards INTO v_shards FROM pgsched.config c;
    FOR s IN 0 .. v_shards - 1 LOOP
        -- fillfactor 45 leaves room on each page for the claim's new
        -- version of every row on it: an update within its page logs only
        -- the bytes that changed and no lock record (about 70 bytes of WAL
        -- a job less than at 80), and heartbeats stay HOT. The hot
        -- partitions are vacuumed early and without throttling.
        EXECUTE pg_catalog.format(
            'CREATE TABLE pgsched.%I PARTITION OF pgsched.jobs FOR VALUES IN (%s) '
            'WITH (fillfactor = 45, autovacuum_vacuum_scale_factor = 0.02, '
            'autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0)',
            'jobs_s' || s, s);
        -- Workers and scanners vacuum the hot partitions themselves (see
        -- vacuum_candidates); PostgreSQL 17 lets the owner say so.
        IF pg_catalog.current_setting('server_version_num')::integer >= 170000 THEN
            EXECUTE pg_catalog.format('GRANT MAINTAIN ON pgsched.%I TO pgsched_worker', 'jobs_s' || s);
        END IF;
    END LOOP;
    EXECUTE pg_catalog.format(
        'ALTER TABLE pgsched.jobs ALTER COLUMN shard SET DEFAULT pgsched._home_shard(%s)',
        v_shards);
    EXECUTE pg_catalog.format(
        'ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_shard_range CHECK (shard >= 0 AND shard < %s)', v_shards);
    INSERT INTO pgsched.shard_leases (shard) SELECT pg_catalog.generate_series(0, v_shards - 1);
END
$$;

-- The ring of pgsched.ready: eight unlogged slots (10_tables.sql), slot 0
-- open. Each is emptied by TRUNCATE once its jobs are claimed
-- (rotate_ready); autovacuum still visits a slot that a long backlog keeps
-- from being emptied.
DO $$
BEGIN
    FOR s IN 0 .. 7 LOOP
        EXECUTE pg_catalog.format(
            'CREATE UNLOGGED TABLE pgsched.%I PARTITION OF pgsched.ready FOR VALUES IN (%s)',
            'ready_s' || s, s);
    END LOOP;
    INSERT INTO pgsched.ready_intact DEFAULT VALUES;
    INSERT INTO pgsched.ready_ring (slot, opened_at, closed_at)
    SELECT s, CASE WHEN s = 0 THEN pg_catalog.now() END, CASE WHEN s <> 0 THEN pg_catalog.now() END
    FROM pg_catalog.generate_series(0, 7) s;
END
$$;

CREATE TABLE pgsched.job_history_default PARTITION OF pgsched.job_history DEFAULT;
CREATE TABLE pgsched.job_events_default PARTITION OF pgsched.job_events DEFAULT;
CREATE TABLE pgsched.queue_minutes_default PARTITION OF pgsched.queue_minutes DEFAULT;

SELECT pgsched.maintain();
