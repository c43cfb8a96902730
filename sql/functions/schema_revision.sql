-- schema_revision
-- contract: the migration revision of this pgsched schema (NULL for an
-- install made from sql/ without the migration tool), readable by every
-- pgsched role so workers can check they match the database before they run.
CREATE OR REPLACE FUNCTION pgsched.schema_revision()
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_revision text;
BEGIN
    IF pg_catalog.to_regclass('pgsched.alembic_version') IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE 'SELECT version_num FROM pgsched.alembic_version LIMIT 1' INTO v_revision;
    RETURN v_revision;
END
$$;
