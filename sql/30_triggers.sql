-- pgsched: triggers.
CREATE TRIGGER tg_jobs__before_insert
    BEFORE INSERT ON pgsched.jobs
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_jobs__before_insert();
