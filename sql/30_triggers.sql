-- pgsched: triggers.
CREATE TRIGGER tg_jobs__before_insert
    BEFORE INSERT ON pgsched.jobs
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_jobs__before_insert();

CREATE TRIGGER tg_schedules__before_write
    BEFORE INSERT OR UPDATE ON pgsched.schedules
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_schedules__before_write();
