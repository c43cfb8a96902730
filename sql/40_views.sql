-- pgsched: views, the operator's surface. Per queue, never only averages.

-- queue_stats: depth by state, the age of the oldest due job, retries, and
-- over the last five minutes the finished counts, throughput and start lag
-- (handler start - due) percentiles. running counts jobs whose handler has
-- started; claimed, those leased to a worker and waiting for a free slot.
CREATE OR REPLACE VIEW pgsched.queue_stats AS
WITH active AS (
    SELECT j.queue,
           pg_catalog.count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
           pg_catalog.count(*) FILTER (WHERE j.state = 'available') AS available,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.started_at IS NOT NULL) AS running,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.started_at IS NULL) AS claimed,
           pg_catalog.count(*) FILTER (WHERE j.state IN ('scheduled', 'available') AND j.attempt > 0) AS retrying,
           pg_catalog.count(*) FILTER (WHERE j.state = 'running' AND j.lease_expires_at < pg_catalog.now())
               AS lease_expired,
           -- compared as text: an enum value cannot be used in the transaction that adds it (a migration)
           pg_catalog.count(*) FILTER (WHERE j.state::text = 'waiting') AS waiting,
           pg_catalog.min(j.run_at) FILTER (
               WHERE j.state = 'available' OR (j.state = 'scheduled' AND j.run_at <= pg_catalog.now()))
               AS oldest_due_at
    FROM pgsched.jobs j
    GROUP BY j.queue
), recent AS (
    -- (date_part, a float8, sorts in about half the time of EXTRACT's numeric)
    SELECT h.queue,
           pg_catalog.count(*) FILTER (WHERE h.state = 'completed') AS completed_5m,
           pg_catalog.count(*) FILTER (WHERE h.state = 'dead') AS dead_5m,
           pg_catalog.count(*) FILTER (WHERE h.state = 'cancelled') AS cancelled_5m,
           pg_catalog.percentile_cont(0.5) WITHIN GROUP (
               ORDER BY pg_catalog.date_part('epoch', h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p50,
           pg_catalog.percentile_cont(0.95) WITHIN GROUP (
               ORDER BY pg_catalog.date_part('epoch', h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p95,
           pg_catalog.percentile_cont(0.99) WITHIN GROUP (
               ORDER BY pg_catalog.date_part('epoch', h.started_at - h.run_at)) FILTER (WHERE h.started_at IS NOT NULL)
               AS lag_p99
    FROM pgsched.job_history h
    WHERE h.finished_at > pg_catalog.now() - interval '5 minutes'
    GROUP BY h.queue
), names AS (
    SELECT a.queue FROM active a
    UNION SELECT r.queue FROM recent r
    UNION SELECT q.name FROM pgsched.queues q
)
SELECT n.queue,
       coalesce(q.paused, false) AS paused,
       coalesce(a.scheduled, 0) AS scheduled,
       coalesce(a.available, 0) AS available,
       coalesce(a.running, 0) AS running,
       coalesce(a.retrying, 0) AS retrying,
       coalesce(a.lease_expired, 0) AS lease_expired,
       coalesce(EXTRACT(EPOCH FROM pg_catalog.now() - a.oldest_due_at), 0)::double precision AS oldest_due_age_s,
       coalesce(r.completed_5m, 0) AS completed_5m,
       coalesce(r.dead_5m, 0) AS dead_5m,
       coalesce(r.cancelled_5m, 0) AS cancelled_5m,
       round((coalesce(r.completed_5m, 0) / 300.0)::numeric, 2)::double precision AS completed_per_s,
       r.lag_p50::double precision AS lag_p50_s,
       r.lag_p95::double precision AS lag_p95_s,
       r.lag_p99::double precision AS lag_p99_s,
       coalesce(a.claimed, 0) AS claimed,
       coalesce(a.waiting, 0) AS waiting
FROM names n
LEFT JOIN active a ON a.queue = n.queue
LEFT JOIN recent r ON r.queue = n.queue
LEFT JOIN pgsched.queues q ON q.name = n.queue;
COMMENT ON VIEW pgsched.queue_stats IS
    'Per queue: depth by state (running: handler started; claimed: leased, waiting for a slot; waiting: for dependencies), oldest due job age, retries waiting, expired leases, and the last 5 minutes of finished work with start-lag percentiles (seconds).';

-- dead_letters: jobs whose latest outcome is dead and that were not redriven.
CREATE OR REPLACE VIEW pgsched.dead_letters AS
SELECT h.id, h.queue, h.task, h.args, h.attempt, h.max_attempts, h.error, h.finished_at AS died_at,
       h.created_at, h.idempotency_key, h.tenant, h.labels, h.leased_by AS last_worker
FROM pgsched.job_history h
WHERE h.state = 'dead'
  AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
  AND NOT EXISTS (SELECT 1 FROM pgsched.job_history h2 WHERE h2.id = h.id AND h2.finished_at > h.finished_at);
COMMENT ON VIEW pgsched.dead_letters IS
    'Dead jobs awaiting a decision: SELECT pgsched.retry(id) redrives one.';

-- workers_live: workers seen in the last minute, with what they hold now:
-- jobs whose handler runs, and jobs claimed that wait for a slot; the tasks
-- it runs (NULL: not reported). The running jobs are counted per worker in
-- one pass over their index (jobs_running_queue_idx); a query that reads
-- neither count does not read them at all (the join is removed).
CREATE OR REPLACE VIEW pgsched.workers_live AS
SELECT w.name, w.host, w.pid, w.queues, w.labels, w.concurrency, w.started_at, w.last_seen,
       EXTRACT(EPOCH FROM pg_catalog.now() - w.last_seen)::double precision AS seen_s_ago,
       coalesce(h.running, 0) AS running, w.version, coalesce(h.claimed, 0) AS claimed,
       w.tasks
FROM pgsched.workers w
LEFT JOIN (
    SELECT j.leased_by,
           pg_catalog.count(*) FILTER (WHERE j.started_at IS NOT NULL) AS running,
           pg_catalog.count(*) FILTER (WHERE j.started_at IS NULL) AS claimed
    FROM pgsched.jobs j
    WHERE j.state = 'running'
    GROUP BY j.leased_by
) h ON h.leased_by = w.name
WHERE w.last_seen > pg_catalog.now() - interval '1 minute';
COMMENT ON VIEW pgsched.workers_live IS 'Workers that reported within the last minute.';

-- schedule_status: each schedule with its next occurrence, its last finished
-- run, and why it cannot fire when it cannot.
CREATE OR REPLACE VIEW pgsched.schedule_status AS
SELECT s.name, s.cron, s.timezone, s.task, s.queue, s.enabled, s.concurrency, s.misfire_policy,
       s.gap_policy, s.overlap_policy, s.expanded_until, s.version, s.last_error,
       (SELECT pg_catalog.min(j.run_at) FROM pgsched.jobs j
        WHERE j.schedule = s.name AND j.state = 'scheduled') AS next_fire_at,
       (SELECT pg_catalog.count(*) FROM pgsched.jobs j
        WHERE j.schedule = s.name AND j.state IN ('available', 'running')) AS in_flight,
       last.finished_at AS last_finished_at, last.state AS last_state
FROM pgsched.schedules s
LEFT JOIN LATERAL (
    SELECT h.finished_at, h.state FROM pgsched.job_history h
    WHERE h.schedule = s.name ORDER BY h.finished_at DESC LIMIT 1
) last ON true;
COMMENT ON VIEW pgsched.schedule_status IS
    'Schedules with their next occurrence, runs in flight, the last outcome and any expansion error.';

-- queue_history: the per-minute rollup (see rollup_queue_history), with the
-- rates and failure totals charts draw. Counts are of the minute; depth and
-- the oldest due age were sampled during it (NULL when nobody sampled);
-- percentiles are of the jobs that finished in it. `final` says the minute
-- was rolled up after it ended (its counts will not change).
CREATE OR REPLACE VIEW pgsched.queue_history AS
SELECT m.minute, m.queue, m.completed, m.failed, m.dead, m.cancelled, m.retried, m.expired,
       m.failed + m.dead + m.expired AS failures,
       round((m.completed / 60.0)::numeric, 3)::double precision AS completed_per_s,
       m.available, m.scheduled, m.running, m.oldest_due_age_s,
       m.lag_p50_s, m.lag_p95_s, m.lag_p99_s, m.run_p50_s, m.run_p95_s, m.run_p99_s,
       m.rolled_at, m.rolled_at >= m.minute + interval '70 seconds' AS final
FROM pgsched.queue_minutes m;
COMMENT ON VIEW pgsched.queue_history IS
    'Per minute and queue: completed, failed (retried runs), dead, cancelled, redriven, expired leases, sampled depth, start-lag and run-time percentiles (seconds).';

-- job_timeline: every transition of every job, in order: those recorded in
-- job_events (failures, retries, snoozes, expiries, cancels, hand-backs, and
-- the claim of every attempt that did not complete) and those derived from
-- the job's own row: the claim of the attempt running now (jobs.claimed_at)
-- and the claim and completion of a completed job's last attempt
-- (job_history.claimed_at, finished_at), and each durable step's finish
-- (kind 'step', detail {name}; jobs.steps or job_history.steps). source says which; seq is the
-- event's for a recorded one. Rows filed before job_history had claimed_at
-- kept recorded claimed/completed events and are not derived again.
-- security_invoker: the reader's row-level security applies, as on the
-- tables (a tenant-bound session sees its own jobs' derived transitions;
-- events carry no tenant, so it sees no recorded ones).
CREATE OR REPLACE VIEW pgsched.job_timeline WITH (security_invoker = true) AS
SELECT t.job_id, t.at, t.kind, t.attempt, t.worker, t.token, t.detail, t.source, t.seq
FROM (
    SELECT e.job_id, e.at, e.kind, e.attempt, e.worker, e.token, e.detail, 'recorded'::text AS source, e.seq,
           CASE e.kind WHEN 'claimed' THEN 0 ELSE 1 END AS step
    FROM pgsched.job_events e
    UNION ALL
    SELECT j.id, j.claimed_at, 'claimed', j.attempt, j.leased_by, j.lease_token, NULL, 'derived', NULL, 0
    FROM pgsched.jobs j
    WHERE j.state = 'running' AND j.claimed_at IS NOT NULL
      -- a claim recorded before events became exceptions
      AND NOT EXISTS (SELECT 1 FROM pgsched.job_events e
                      WHERE e.job_id = j.id AND e.kind = 'claimed' AND e.token = j.lease_token)
    UNION ALL
    SELECT h.id, d.at, d.kind, h.attempt, h.leased_by, h.lease_token, NULL, 'derived', NULL, d.step
    FROM pgsched.job_history h
    CROSS JOIN LATERAL (VALUES (h.claimed_at, 'claimed', 0), (h.finished_at, 'completed', 2)) AS d(at, kind, step)
    WHERE h.state = 'completed' AND h.claimed_at IS NOT NULL
    UNION ALL
    -- durable steps (docs/steps.md), of an active or a finished job: name only, never the result
    SELECT s.id, (e.step ->> 'at')::timestamptz, 'step', (e.step ->> 'attempt')::integer, e.step ->> 'worker',
           (e.step ->> 'token')::bigint, pg_catalog.jsonb_build_object('name', e.step -> 'name'), 'derived', NULL, 1
    FROM (SELECT j.id, j.steps FROM pgsched.jobs j WHERE j.steps IS NOT NULL
          UNION ALL
          SELECT h.id, h.steps FROM pgsched.job_history h WHERE h.steps IS NOT NULL) s
    CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(s.steps) AS e(step)
) t
ORDER BY t.job_id, t.at, t.attempt, t.step, t.seq;
COMMENT ON VIEW pgsched.job_timeline IS
    'Every transition of a job in order: recorded (job_events: the exceptions) and derived (jobs/job_history: the claim of a running attempt, the claim and completion of a completed job). Obeys the reader''s row-level security.';
