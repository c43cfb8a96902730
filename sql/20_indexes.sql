-- pgsched: indexes. Partial indexes keep each path to its own small set of rows:
-- claims never read scheduled or running rows, promotion never reads due ones.

-- Claim: due jobs of a queue in dispatch order (priority, or aged priority;
-- by tenant under fairness: see tg_jobs__dispatch). In pgsched.ready, the
-- due jobs' own table (10_tables.sql), not in pgsched.jobs.
CREATE INDEX ready_claim_idx ON pgsched.ready (queue, dispatch_group, dispatch_rank, dispatch_at, id);
-- Tenant fairness: a tenant's latest stamp in a fair queue, one probe at
-- enqueue (see _fair_stamp); only fair queues' due jobs enter it.
CREATE INDEX ready_fair_idx ON pgsched.ready (queue, (coalesce(tenant, '')), dispatch_at)
    WHERE dispatch_group = '*';
-- Promotion: the earliest scheduled job is one index probe, whatever the backlog.
CREATE INDEX jobs_scheduled_idx ON pgsched.jobs (run_at)
    WHERE state = 'scheduled';
-- Leased jobs per queue and key: what concurrency limits count, and the one
-- index of running jobs (workers_live counts them per worker in one pass
-- over it: a second index by worker cost every claim an entry, ~70 bytes of
-- WAL). Heartbeats change lease_expires_at only, which is in no index, so
-- they can be HOT updates.
CREATE INDEX jobs_running_queue_idx ON pgsched.jobs (queue, concurrency_key)
    WHERE state = 'running';
-- Due jobs that need labels: what the unserved-labels check reads (unlabelled
-- jobs never enter it). On pgsched.jobs, not on the unlogged pgsched.ready:
-- the check runs on read replicas too (stats --read-dsn).
CREATE INDEX jobs_labelled_idx ON pgsched.jobs (queue, labels)
    WHERE state = 'available' AND labels <> '{}';

-- Jobs passed over while no live worker knew their task: what the
-- unserved-tasks check reads (no other job enters it).
CREATE INDEX jobs_unserved_idx ON pgsched.jobs (queue, task)
    WHERE unserved_since IS NOT NULL;

CREATE INDEX job_history_id_idx ON pgsched.job_history (id);
-- Recent history (queue_stats' last five minutes): rows arrive in finished_at
-- order, so a BRIN index finds them for a fraction of a btree's upkeep.
CREATE INDEX job_history_finished_at_idx ON pgsched.job_history USING brin (finished_at);
CREATE INDEX job_history_dead_idx ON pgsched.job_history (finished_at)
    WHERE state = 'dead';
-- The event stream reads history in transaction order from a position
-- (pgsched.read_events), a window of transaction ids at a time. Rows arrive
-- in about that order (a job's history row is filed by the transaction that
-- finishes it), so a BRIN index of the position as a number finds a window's
-- rows for no write per row: a btree cost every job 64 bytes of WAL. A
-- transaction that files rows long after it began widens only its range's
-- summary, and only for windows that reach back to it. Ranges are
-- summarized as they fill (autosummarize), not at the next vacuum.
CREATE INDEX job_history_position_idx ON pgsched.job_history
    USING brin (((finished_xid::text)::bigint)) WITH (autosummarize = on);

CREATE INDEX job_events_job_id_idx ON pgsched.job_events (job_id, seq);
-- The per-minute rollup reads recent events by time; they arrive in order too.
CREATE INDEX job_events_at_idx ON pgsched.job_events USING brin (at);

-- Occurrences of recurring schedules: overlap policies look up a schedule's runs.
CREATE INDEX jobs_schedule_idx ON pgsched.jobs (schedule)
    WHERE schedule IS NOT NULL;

-- A waiting job's own dependencies: dropped with it when it is cancelled.
CREATE INDEX job_dependencies_job_idx ON pgsched.job_dependencies (job);
