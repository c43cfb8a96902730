-- pgsched: triggers. CREATE OR REPLACE, so a migration can apply this file whole.
--
-- Every row entering pgsched.jobs passes tg_jobs__before_insert, except rows
-- written by the owner's enqueue functions (enqueue, enqueue_many,
-- enqueue_service, enqueue_command), which do the same work themselves and
-- name the attempt column (0). The mark is in the row, not in the session:
-- attempt has no default and no other role may name it (90_grants.sql), so a
-- row of any other writer, and a row of another owner function (retry, the
-- scanners' add_occurrences), arrives with attempt NULL and passes the
-- trigger, whatever the caller has SET.
-- Writers other than the owner (plain INSERTs by applications) pass the
-- 'untrusted' trigger, which also assigns id, shard and created_at and
-- refuses a schedule link; CURRENT_USER in WHEN is the writer's role, before
-- the SECURITY DEFINER function switches to the owner.
DO $$
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__before_insert
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER <> %L)
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('untrusted')
        $sql$, current_user);
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__before_insert_owner
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER = %L AND NEW.attempt IS NULL)
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('owner')
        $sql$, current_user);
END
$$;

CREATE OR REPLACE TRIGGER tg_schedules__before_write
    BEFORE INSERT OR UPDATE ON pgsched.schedules
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_schedules__before_write();

CREATE OR REPLACE TRIGGER tg_config__before_update
    BEFORE UPDATE ON pgsched.config
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_config__before_update();

-- After the insert triggers (names fire in order): the claim order of a row
-- from its queue's dispatch policy. A row the schema's owner writes with its
-- dispatch_* columns already stamped (enqueue() and enqueue_many() compute
-- them in their INSERT, as this trigger would) skips it; the columns have no
-- default, so any other row of the owner's arrives with dispatch_at NULL and
-- is stamped here, and a row of any other writer always is, whatever its
-- INSERT said. UPDATE OF: claims, heartbeats and completions, which set none
-- of these columns, never fire the update trigger.
DO $$
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__dispatch
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER <> %L OR NEW.dispatch_at IS NULL)
            EXECUTE FUNCTION pgsched.tg_jobs__dispatch()
        $sql$, current_user);
END
$$;
CREATE OR REPLACE TRIGGER tg_jobs__redispatch
    BEFORE UPDATE OF run_at, priority, queue, tenant ON pgsched.jobs
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_jobs__dispatch();

-- pgsched.ready, the due jobs claims read (10_tables.sql), follows the jobs:
-- the due rows of each INSERT statement at once, then each job that becomes
-- due, stops being due or moves in the claim order while due. The claim's
-- own transition (available to running) is not one of them: claims remove
-- their jobs' rows in the statement that leases them. Heartbeats, starts and
-- completions (running rows) fail the WHEN and cost nothing more.
CREATE OR REPLACE TRIGGER tg_jobs__ready_rows
    AFTER INSERT ON pgsched.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.tg_jobs__ready_rows();
CREATE OR REPLACE TRIGGER tg_jobs__ready_row
    AFTER UPDATE ON pgsched.jobs
    FOR EACH ROW
    WHEN ((OLD.state = 'available' OR NEW.state = 'available') AND NEW.state <> 'running'
          AND (OLD.state <> NEW.state
               OR (OLD.queue, OLD.dispatch_group, OLD.dispatch_rank, OLD.dispatch_at, OLD.priority, OLD.labels,
                   OLD.tenant, OLD.concurrency_key)
                  IS DISTINCT FROM (NEW.queue, NEW.dispatch_group, NEW.dispatch_rank, NEW.dispatch_at, NEW.priority,
                                    NEW.labels, NEW.tenant, NEW.concurrency_key)))
    EXECUTE FUNCTION pgsched.tg_jobs__ready_row();
CREATE OR REPLACE TRIGGER tg_jobs__ready_gone
    AFTER DELETE ON pgsched.jobs
    FOR EACH ROW
    WHEN (OLD.state = 'available')
    EXECUTE FUNCTION pgsched.tg_jobs__ready_row();
-- TRUNCATE of pgsched.jobs (tests, benchmarks, a reset by hand) empties the
-- due rows with it: no row trigger sees it.
CREATE OR REPLACE TRIGGER tg_jobs__ready_truncate
    AFTER TRUNCATE ON pgsched.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.tg_jobs__ready_truncate();
