-- pgsched: triggers.
--
-- Every row entering pgsched.jobs passes tg_jobs__before_insert, except rows
-- written by enqueue() and enqueue_many(), which do the same work set-based
-- and mark themselves with the transaction-local setting
-- pgsched.trusted_insert. The mark counts only for the schema's owner (those
-- functions run as the owner), so no other role can skip the trigger.
DO $$
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE TRIGGER tg_jobs__before_insert
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (pg_catalog.current_setting('pgsched.trusted_insert', true) IS DISTINCT FROM 'on'
                  OR CURRENT_USER <> %L)
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert()
        $sql$, current_user);
END
$$;

CREATE TRIGGER tg_schedules__before_write
    BEFORE INSERT OR UPDATE ON pgsched.schedules
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_schedules__before_write();
