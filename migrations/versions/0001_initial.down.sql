-- Removes pgsched's objects from this database, keeping only the schema and
-- its alembic_version table (alembic records the downgrade there). The roles
-- are cluster-wide and stay.
DO $$
DECLARE
    v_obj record;
BEGIN
    FOR v_obj IN
        SELECT c.relname FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'pgsched' AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version'
          AND NOT c.relispartition
    LOOP
        EXECUTE pg_catalog.format('DROP TABLE IF EXISTS pgsched.%I CASCADE', v_obj.relname);
    END LOOP;
END
$$;
DO $$
DECLARE
    v_obj record;
BEGIN
    FOR v_obj IN
        SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'pgsched' AND c.relkind IN ('v', 'S')
    LOOP
        EXECUTE pg_catalog.format(
            CASE v_obj.relkind WHEN 'v' THEN 'DROP VIEW IF EXISTS pgsched.%I CASCADE'
                               ELSE 'DROP SEQUENCE IF EXISTS pgsched.%I CASCADE' END, v_obj.relname);
    END LOOP;
    FOR v_obj IN
        SELECT p.oid::regprocedure AS sig FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'pgsched'
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS %s CASCADE', v_obj.sig);
    END LOOP;
END
$$;
DROP TYPE IF EXISTS pgsched.job_state CASCADE;
