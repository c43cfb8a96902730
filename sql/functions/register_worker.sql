-- register_worker
-- contract: records a worker as live (or refreshes it) for operators;
-- heartbeat(worker => name) keeps last_seen current and unregister_worker()
-- removes it on a clean exit. resource_limits says how a worker that runs
-- command jobs limits them ('cgroup v1 (...)', 'cgroup v2 (...)', 'rlimit
-- (...)'; NULL: it runs none), for pgsched doctor.
CREATE OR REPLACE FUNCTION pgsched.register_worker(
    name        text,
    host        text    DEFAULT NULL,
    pid         integer DEFAULT NULL,
    queues      text[]  DEFAULT '{}',
    labels      text[]  DEFAULT '{}',
    concurrency integer DEFAULT NULL,
    version     text    DEFAULT NULL,
    resource_limits text DEFAULT NULL
)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    INSERT INTO pgsched.workers AS w
        (name, host, pid, queues, labels, concurrency, version, started_at, last_seen, resource_limits)
    VALUES (register_worker.name, register_worker.host, register_worker.pid, coalesce(register_worker.queues, '{}'),
            coalesce(register_worker.labels, '{}'), register_worker.concurrency, register_worker.version,
            pg_catalog.now(), pg_catalog.now(), register_worker.resource_limits)
    ON CONFLICT (name) DO UPDATE
    SET host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues, labels = EXCLUDED.labels,
        concurrency = EXCLUDED.concurrency, version = EXCLUDED.version,
        started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen, running = 0,
        resource_limits = EXCLUDED.resource_limits
$$;
