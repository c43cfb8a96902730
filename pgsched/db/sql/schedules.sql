-- Recurring schedules: writing them (the CLI, @app.cron), listing them, what scanners expand.

-- name: upsert_schedule
-- A code-defined schedule (@app.cron), written when an App registers its tasks.
SELECT pgsched.upsert_schedule(name => %s, cron => %s, task => %s, args => %s, timezone => %s,
    queue => %s, priority => %s, max_attempts => %s, gap_policy => %s, overlap_policy => %s,
    misfire_policy => %s, misfire_cap => %s, misfire_grace => %s, concurrency => %s,
    enabled => %s, horizon => %s, source => 'code');

-- name: upsert_schedule_cli
-- `pgsched schedules add`.
SELECT pgsched.upsert_schedule(name => %s, cron => %s, task => %s, args => %s::jsonb,
    timezone => %s, queue => %s, priority => %s, max_attempts => %s, gap_policy => %s,
    overlap_policy => %s, misfire_policy => %s, misfire_cap => %s, concurrency => %s,
    enabled => %s, labels => %s::text[], tenant => %s, source => 'cli') AS version;

-- name: schedule_status
-- Every schedule with its next fire and last outcome (`pgsched schedules list`, the dashboard).
SELECT * FROM pgsched.schedule_status ORDER BY name;

-- name: schedule
-- One schedule's row, by name (`pgsched schedules preview NAME`).
SELECT * FROM pgsched.schedules WHERE name = %s;

-- name: due_schedules
-- Schedules of these shards that need expanding, the most behind first (a busy one cannot keep
-- the others waiting); one whose version failed waits for an edit.
SELECT name, cron, timezone, enabled, gap_policy, overlap_policy, misfire_policy, misfire_cap,
       misfire_grace, horizon, shard, version, expanded_version, expanded_until,
       clock_timestamp() AS db_now
FROM pgsched.schedules
WHERE shard = ANY(%s)
  AND (expanded_version <> version
       OR (enabled AND last_error IS NULL
           AND (expanded_until IS NULL OR expanded_until < clock_timestamp() + horizon / 2)))
ORDER BY expanded_version <> version DESC, expanded_until NULLS FIRST, name;
