-- vacuum_candidates
-- contract: the partitions of pgsched.jobs that the caller may vacuum and
-- that hold at least p_min_dead dead row versions, and at least p_ratio
-- times as many as live ones (the statistics' counts), most dead first.
-- Every job leaves two dead versions behind it (claimed, then finished);
-- autovacuum visits a database once a minute at best (autovacuum_naptime),
-- by which time a busy queue has piled up hundreds of thousands and claims
-- wade through them. Workers and scanners VACUUM what this names every few
-- seconds instead; a caller that may not vacuum (neither a member of the
-- owner role nor, on PostgreSQL 17 and later, holding MAINTAIN) gets nothing.
CREATE OR REPLACE FUNCTION pgsched.vacuum_candidates(
    p_min_dead bigint           DEFAULT 10000,
    p_ratio    double precision DEFAULT 0.2
)
RETURNS TABLE (schema_name text, table_name text, dead bigint, live bigint)
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
    SELECT n.nspname::text, c.relname::text, s.n_dead_tup, s.n_live_tup
    FROM pg_catalog.pg_inherits i
    JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_catalog.pg_stat_all_tables s ON s.relid = c.oid
    WHERE i.inhparent = 'pgsched.jobs'::pg_catalog.regclass
      AND s.n_dead_tup >= p_min_dead
      AND s.n_dead_tup >= p_ratio * s.n_live_tup
      AND (pg_catalog.pg_has_role(c.relowner, 'USAGE')
           OR CASE WHEN v_maintain THEN pg_catalog.has_table_privilege(c.oid, 'MAINTAIN') ELSE false END)
    ORDER BY s.n_dead_tup DESC;
END
$$;
