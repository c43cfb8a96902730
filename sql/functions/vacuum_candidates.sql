-- vacuum_candidates
-- contract: the partitions of pgsched.jobs that the caller may vacuum or
-- analyze (a member of the owner role, or, on PostgreSQL 17 and later, one
-- holding MAINTAIN), and that need it now, most dead rows first:
--   vacuum  at least p_min_dead dead row versions, and at least p_ratio times
--           as many dead as live (the statistics' counts). Every job leaves
--           two behind (claimed, then finished), and autovacuum visits a
--           database once per autovacuum_naptime (a minute) at best: a busy
--           queue piles up hundreds of thousands in between, and claims wade
--           through them.
--   analyze the planner's row count (pg_class.reltuples) is off from the live
--           rows by more than 1,000 and by more than half. Cached plans of
--           claim, heartbeat and complete are built for the table's size
--           when first used; built on an empty table, they scan it, and stay
--           until the next ANALYZE: a burst of 400,000 jobs then makes each
--           claim take 170 ms instead of 0.5 ms. ANALYZE replaces them.
--           Or the partition has grown past twice the pages the planner
--           last recorded (pg_class.relpages), and by more than 32: under a
--           pinned xmin horizon the live rows stay few while dead ones fill
--           the pages, no vacuum runs (nothing to remove) and so nothing
--           replans; plans made while the partition was a page or two (a
--           hash join over sequential scans) read every dead row at each
--           start() and complete(). Replanned for its size, each job is a
--           primary-key probe.
-- Workers and scanners run VACUUM / ANALYZE (SKIP_LOCKED) on what this names
-- every few seconds (pgsched/vacuumer.py).
CREATE OR REPLACE FUNCTION pgsched.vacuum_candidates(
    p_min_dead bigint           DEFAULT 10000,
    p_ratio    double precision DEFAULT 0.2
)
RETURNS TABLE (schema_name text, table_name text, dead bigint, live bigint, needs_vacuum boolean, needs_analyze boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_maintain boolean := pg_catalog.current_setting('server_version_num')::integer >= 170000;
BEGIN
    IF p_min_dead IS NULL OR p_min_dead < 0 OR p_ratio IS NULL OR p_ratio < 0 THEN
        RAISE EXCEPTION 'pgsched: vacuum_candidates needs p_min_dead >= 0 and p_ratio >= 0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    SELECT t.schema_name, t.table_name, t.dead, t.live, t.needs_vacuum, t.needs_analyze
    FROM (
        SELECT n.nspname::text AS schema_name, c.relname::text AS table_name,
               s.n_dead_tup AS dead, s.n_live_tup AS live,
               s.n_dead_tup >= p_min_dead AND s.n_dead_tup >= p_ratio * s.n_live_tup AS needs_vacuum,
               pg_catalog.abs(s.n_live_tup - greatest(c.reltuples, 0))
                   > greatest(1000, 0.5 * greatest(c.reltuples, 0))
               OR pg_catalog.pg_relation_size(c.oid)
                   / pg_catalog.current_setting('block_size')::bigint > 2 * c.relpages + 32 AS needs_analyze
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_catalog.pg_stat_all_tables s ON s.relid = c.oid
        WHERE i.inhparent = 'pgsched.jobs'::pg_catalog.regclass
          AND (pg_catalog.pg_has_role(c.relowner, 'USAGE')
               OR CASE WHEN v_maintain THEN pg_catalog.has_table_privilege(c.oid, 'MAINTAIN') ELSE false END)
    ) t
    WHERE t.needs_vacuum OR t.needs_analyze
    ORDER BY t.dead DESC;
END
$$;
