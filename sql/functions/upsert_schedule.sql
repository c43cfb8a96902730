-- upsert_schedule
-- contract: creates the schedule `name`, or updates it when it exists (an
-- update that changes what it fires takes effect at the next scan: future
-- occurrences expanded under the old definition are withdrawn and replaced).
-- Returns the schedule's version afterwards. Refuses (with the reason) a
-- schedule that could never be expanded: see _check_schedule. A session
-- confined to a tenant writes only schedules of its tenant; a worker login
-- (without pgsched_admin) only schedules defined in code (see
-- _check_schedule_write).
CREATE OR REPLACE FUNCTION pgsched.upsert_schedule(
    name           text,
    cron           text,
    task           text,
    args           jsonb    DEFAULT '{}',
    timezone       text     DEFAULT 'UTC',
    queue          text     DEFAULT 'default',
    priority       integer  DEFAULT 0,
    max_attempts   integer  DEFAULT NULL,
    gap_policy     text     DEFAULT 'run',
    overlap_policy text     DEFAULT 'once',
    misfire_policy text     DEFAULT 'latest',
    misfire_cap    integer  DEFAULT 100,
    misfire_grace  interval DEFAULT '1 minute',
    concurrency    text     DEFAULT 'skip',
    enabled        boolean  DEFAULT true,
    horizon        interval DEFAULT '1 hour',
    labels         text[]   DEFAULT '{}',
    tenant         text     DEFAULT NULL,
    source         text     DEFAULT 'sql'
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT pgsched._check_schedule_write(upsert_schedule.name, upsert_schedule.tenant,
                                         coalesce(upsert_schedule.source, 'sql'));
    SELECT pgsched._check_schedule(upsert_schedule.cron, upsert_schedule.priority, upsert_schedule.max_attempts,
                                   upsert_schedule.labels, upsert_schedule.tenant, upsert_schedule.args);
    INSERT INTO pgsched.schedules AS s
        (name, cron, task, args, timezone, queue, priority, max_attempts, gap_policy, overlap_policy,
         misfire_policy, misfire_cap, misfire_grace, concurrency, enabled, horizon, labels, tenant, source, shard)
    VALUES (upsert_schedule.name, upsert_schedule.cron, upsert_schedule.task, coalesce(upsert_schedule.args, '{}'),
            coalesce(upsert_schedule.timezone, 'UTC'), coalesce(upsert_schedule.queue, 'default'),
            coalesce(upsert_schedule.priority, 0), upsert_schedule.max_attempts,
            coalesce(upsert_schedule.gap_policy, 'run'), coalesce(upsert_schedule.overlap_policy, 'once'),
            coalesce(upsert_schedule.misfire_policy, 'latest'), coalesce(upsert_schedule.misfire_cap, 100),
            coalesce(upsert_schedule.misfire_grace, interval '1 minute'),
            coalesce(upsert_schedule.concurrency, 'skip'), coalesce(upsert_schedule.enabled, true),
            coalesce(upsert_schedule.horizon, interval '1 hour'), coalesce(upsert_schedule.labels, '{}'),
            upsert_schedule.tenant, coalesce(upsert_schedule.source, 'sql'), 0)
    ON CONFLICT (name) DO UPDATE
    SET cron = EXCLUDED.cron, task = EXCLUDED.task, args = EXCLUDED.args, timezone = EXCLUDED.timezone,
        queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
        gap_policy = EXCLUDED.gap_policy, overlap_policy = EXCLUDED.overlap_policy,
        misfire_policy = EXCLUDED.misfire_policy, misfire_cap = EXCLUDED.misfire_cap,
        misfire_grace = EXCLUDED.misfire_grace,
        concurrency = EXCLUDED.concurrency, enabled = EXCLUDED.enabled, horizon = EXCLUDED.horizon,
        labels = EXCLUDED.labels, tenant = EXCLUDED.tenant, source = EXCLUDED.source
    WHERE pgsched._tenant_visible(s.tenant)
    RETURNING s.version
$$;
