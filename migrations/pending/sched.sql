-- sched: schedules expanded by workers when no scanner runs; schedules validated at write.
-- New private helpers and the workers' idle-shard leases (function bodies come from sql/functions/).
REVOKE EXECUTE ON FUNCTION pgsched.acquire_idle_shards(text, interval, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched._check_schedule(text, integer, integer, text[], text, jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched._cron_field(text, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched._cron_value(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.acquire_idle_shards(text, interval, timestamptz) TO pgsched_worker;
