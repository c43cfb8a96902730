-- tg_schedules__before_write
-- contract: a schedule lives on the shard of its name; any change to what a
-- schedule fires (cron, zone, task, args, queue, policies, enabled...) bumps
-- its version, so the next scan withdraws the occurrences expanded under the
-- old version and expands the new one. Works for plain INSERT/UPDATE too,
-- which are refused what upsert_schedule refuses (_check_schedule,
-- _check_schedule_names; and the command task, _check_command_task)
-- (SECURITY DEFINER: pgsched_admin writes the table but not the helpers).
CREATE OR REPLACE FUNCTION pgsched.tg_schedules__before_write()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_command_task(NEW.task, 'a schedule');
    IF TG_OP = 'INSERT' OR (NEW.name, NEW.task, NEW.timezone) IS DISTINCT FROM (OLD.name, OLD.task, OLD.timezone) THEN
        PERFORM pgsched._check_schedule_names(NEW.name, NEW.task, NEW.timezone);
    END IF;
    IF TG_OP = 'INSERT' OR (NEW.cron, NEW.priority, NEW.max_attempts, NEW.labels, NEW.tenant, NEW.args)
                           IS DISTINCT FROM (OLD.cron, OLD.priority, OLD.max_attempts, OLD.labels, OLD.tenant, OLD.args) THEN
        PERFORM pgsched._check_schedule(NEW.cron, NEW.priority, NEW.max_attempts, NEW.labels, NEW.tenant, NEW.args);
    END IF;
    NEW.shard := pgsched._shard_for_key(NEW.name);
    IF TG_OP = 'INSERT' THEN
        NEW.version := 1;
        NEW.expanded_version := 0;
        NEW.expanded_until := NULL;
        RETURN NEW;
    END IF;
    IF NEW.name <> OLD.name THEN
        RAISE EXCEPTION 'pgsched: a schedule cannot be renamed; remove it and add it again'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF (NEW.cron, NEW.timezone, NEW.task, NEW.args, NEW.queue, NEW.priority, NEW.max_attempts, NEW.labels,
        NEW.tenant, NEW.gap_policy, NEW.overlap_policy, NEW.misfire_policy, NEW.misfire_cap, NEW.misfire_grace, NEW.concurrency,
        NEW.enabled, NEW.horizon)
       IS DISTINCT FROM
       (OLD.cron, OLD.timezone, OLD.task, OLD.args, OLD.queue, OLD.priority, OLD.max_attempts, OLD.labels,
        OLD.tenant, OLD.gap_policy, OLD.overlap_policy, OLD.misfire_policy, OLD.misfire_cap, OLD.misfire_grace, OLD.concurrency,
        OLD.enabled, OLD.horizon) THEN
        NEW.version := OLD.version + 1;
        NEW.updated_at := pg_catalog.now();
        NEW.last_error := NULL;
    END IF;
    RETURN NEW;
END
$$;
