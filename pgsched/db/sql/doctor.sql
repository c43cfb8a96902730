-- `pgsched doctor`: what each health check reads.

-- name: doctor_server
SELECT current_setting('server_version') AS v, current_database() AS db;

-- name: doctor_xmin_holders
-- Who holds back the xmin horizon: sessions (with their query), prepared transactions, slots.
SELECT h.holder, h.pid, h.xid_age AS xmin_age, h.age_s, h.state, h.application_name,
       a.usename AS "user", a.client_addr::text AS client,
       left(regexp_replace(a.query, '\s+', ' ', 'g'), 120) AS query
FROM pgsched.xmin_horizon() h
LEFT JOIN pg_stat_activity a ON a.pid = h.pid AND h.holder = 'session'
LIMIT 5;

-- name: doctor_idle_transactions
SELECT pid, application_name, now() - state_change AS idle_for,
       left(regexp_replace(query, '\s+', ' ', 'g'), 120) AS query
FROM pg_stat_activity
WHERE state IN ('idle in transaction', 'idle in transaction (aborted)') AND pid <> pg_backend_pid()
ORDER BY state_change;

-- name: doctor_jobs
-- Leases expired more than a minute ago (no scanner or worker expires them) and due jobs waiting.
SELECT (SELECT count(*) FROM pgsched.jobs
        WHERE state = 'running' AND lease_expires_at < now() - interval '1 minute') AS expired,
       (SELECT min(lease_expires_at) FROM pgsched.jobs
        WHERE state = 'running' AND lease_expires_at < now() - interval '1 minute') AS oldest_expired,
       (SELECT extract(epoch FROM now() - min(run_at)) FROM pgsched.jobs
        WHERE state IN ('available', 'scheduled') AND run_at <= now()) AS oldest_due_s,
       (SELECT count(*) FROM pgsched.jobs
        WHERE state IN ('available', 'scheduled') AND run_at <= now()) AS due;

-- name: doctor_workers
SELECT count(*) AS n, coalesce(sum(running), 0) AS running FROM pgsched.workers_live;

-- name: doctor_scanners
SELECT count(*) AS n FROM pgsched.scanners WHERE last_seen > now() - interval '1 minute';

-- name: doctor_orphaned_shards
SELECT count(*) AS n FROM pgsched.shard_leases WHERE owner IS NULL OR expires_at < now();

-- name: doctor_resource_limits
-- How the live workers that run commands limit them.
SELECT w.name, w.resource_limits
FROM pgsched.workers w JOIN pgsched.workers_live l ON l.name = w.name
WHERE w.resource_limits IS NOT NULL
ORDER BY w.name;

-- name: doctor_schedules
-- Schedules that nobody expands (their next fire passed with no occurrence filed) or that cannot be.
SELECT s.name, s.shard, s.last_error,
       s.last_error IS NULL AND (s.expanded_until IS NULL OR s.expanded_until < now() - %(margin)s)
           AND s.created_at < now() - %(margin)s AS stale,
       l.owner IS NOT NULL AND l.expires_at > now() AS held, l.owner
FROM pgsched.schedules s
JOIN pgsched.shard_leases l ON l.shard = s.shard
WHERE s.enabled OR s.last_error IS NOT NULL
ORDER BY s.name;

-- name: doctor_held_events
-- Events read_events cannot hand out yet: filed by transactions at or after the oldest one in flight.
SELECT count(*) AS held, now() - min(h.finished_at) AS behind
FROM pgsched.job_history h
WHERE (h.finished_xid::text)::bigint >= pg_snapshot_xmin(pg_current_snapshot())::text::bigint;

-- name: doctor_oldest_xid
-- The oldest transaction in flight with an id: the session (or prepared transaction) the stream waits for.
SELECT * FROM (
    SELECT pid, usename AS "user", application_name, state, now() - xact_start AS xact_age,
           age(backend_xid) AS xid_age, left(regexp_replace(query, '\s+', ' ', 'g'), 120) AS query, NULL AS gid
    FROM pg_stat_activity
    WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
    UNION ALL
    SELECT NULL, owner::text, NULL, 'prepared', now() - prepared, age(transaction), NULL, gid
    FROM pg_prepared_xacts
) t
ORDER BY xid_age DESC
LIMIT 1;

-- name: doctor_notify_queue
SELECT pg_notification_queue_usage() AS usage;
