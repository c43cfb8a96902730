-- register_worker
-- contract: records a worker as live (or refreshes it) for operators;
-- heartbeat(worker => name) keeps last_seen current and unregister_worker()
-- removes it on a clean exit. tasks: the task names it runs (NULL: not
-- reported); pass_over() and the unserved-tasks check read them. Jobs of
-- those tasks passed over while no worker knew them (unserved_since) are due
-- at once, for it. resource_limits says how a worker that runs command jobs
-- limits them ('cgroup v1 (...)', 'cgroup v2 (...)', 'rlimit (...)'; NULL: it
-- runs none), for pgsched doctor.
CREATE OR REPLACE FUNCTION pgsched.register_worker(
    name        text,
    host        text    DEFAULT NULL,
    pid         integer DEFAULT NULL,
    queues      text[]  DEFAULT '{}',
    labels      text[]  DEFAULT '{}',
    concurrency integer DEFAULT NULL,
    version     text    DEFAULT NULL,
    tasks       text[]  DEFAULT NULL,
    resource_limits text DEFAULT NULL
)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    INSERT INTO pgsched.workers AS w
        (name, host, pid, queues, labels, concurrency, version, started_at, last_seen, tasks, resource_limits)
    VALUES (register_worker.name, register_worker.host, register_worker.pid, coalesce(register_worker.queues, '{}'),
            coalesce(register_worker.labels, '{}'), register_worker.concurrency, register_worker.version,
            pg_catalog.now(), pg_catalog.now(), register_worker.tasks, register_worker.resource_limits)
    ON CONFLICT (name) DO UPDATE
    SET host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues, labels = EXCLUDED.labels,
        concurrency = EXCLUDED.concurrency, version = EXCLUDED.version, tasks = EXCLUDED.tasks,
        started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen, running = 0,
        resource_limits = EXCLUDED.resource_limits;
    UPDATE pgsched.jobs j
    SET run_at = pg_catalog.now()
    WHERE j.unserved_since IS NOT NULL AND j.state = 'scheduled' AND j.run_at > pg_catalog.now()
      AND j.task = ANY (register_worker.tasks)
      AND (j.queue = ANY (register_worker.queues) OR '*' = ANY (register_worker.queues))
      AND (pgsched._tenant_scope() IS NULL OR j.tenant = pgsched._tenant_scope())
$$;
