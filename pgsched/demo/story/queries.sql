-- The SQL the story sends. Every call that reads time passes the pretend
-- clock as p_now; each block starts with `-- name: <name>`.

-- name: tables
-- The outside system the crashed-worker scene charges: it remembers the
-- highest fencing token it has seen per idempotency key and refuses lower ones.
CREATE SCHEMA story;
CREATE TABLE story.charges (
    key        text        PRIMARY KEY,
    token      bigint      NOT NULL,
    amount     integer     NOT NULL,
    charged_by text        NOT NULL,
    charged_at timestamptz NOT NULL
);

-- name: charge
INSERT INTO story.charges AS c (key, token, amount, charged_by, charged_at)
VALUES (%(key)s, %(token)s, %(amount)s, %(worker)s, %(now)s)
ON CONFLICT (key) DO UPDATE
SET token = EXCLUDED.token, amount = EXCLUDED.amount, charged_by = EXCLUDED.charged_by,
    charged_at = EXCLUDED.charged_at
WHERE c.token < EXCLUDED.token
RETURNING c.token;

-- name: charges
SELECT key, token, amount, charged_by, charged_at FROM story.charges ORDER BY key;

-- name: enqueue
SELECT pgsched.enqueue(%(task)s, %(args)s, %(queue)s, %(run_at)s, idempotency_key => %(key)s) AS id;

-- name: shard_for_key
SELECT pgsched._shard_for_key(%(key)s) AS shard;

-- name: promote_due
SELECT pgsched.promote_due(p_now => %(now)s) AS n;

-- name: expire_leases
SELECT pgsched.expire_leases(p_now => %(now)s) AS n;

-- name: claim
SELECT id, shard, attempt, lease_token, lease_expires_at, run_at
FROM pgsched.claim(%(worker)s, %(queues)s::text[], %(n)s, %(lease)s::interval, p_now => %(now)s);

-- name: heartbeat
SELECT held, cancel_requested
FROM pgsched.heartbeat(ARRAY[%(id)s]::bigint[], ARRAY[%(token)s]::bigint[], %(lease)s::interval, p_now => %(now)s);

-- name: complete
SELECT accepted FROM pgsched.complete(ARRAY[%(id)s]::bigint[], ARRAY[%(token)s]::bigint[], p_now => %(now)s);

-- name: fail
SELECT pgsched.fail(%(id)s, %(token)s, %(error)s, p_now => %(now)s) AS state;

-- name: cancel
SELECT pgsched.cancel(%(id)s, p_now => %(now)s) AS outcome;

-- name: job
-- The job's active row, else its history row.
SELECT id, shard, state::text AS state, run_at, attempt, lease_token, leased_by, lease_expires_at,
       started_at, NULL::timestamptz AS finished_at, NULL::text AS error, idempotency_key, schedule
FROM pgsched.jobs WHERE id = %(id)s
UNION ALL
SELECT id, shard, state::text, run_at, attempt, lease_token, leased_by, NULL,
       started_at, finished_at, error, idempotency_key, schedule
FROM pgsched.job_history WHERE id = %(id)s
LIMIT 1;

-- name: jobs_with_key
SELECT (SELECT count(*) FROM pgsched.jobs WHERE idempotency_key = %(key)s)
     + (SELECT count(*) FROM pgsched.job_history WHERE idempotency_key = %(key)s) AS n;

-- name: key
SELECT k.job_id, k.expires_at, c.idempotency_retention AS retention
FROM pgsched.idempotency_keys k, pgsched.config c WHERE k.key = %(key)s;

-- name: events
SELECT kind, attempt, worker, token, at FROM pgsched.job_timeline WHERE job_id = %(id)s;

-- name: acquire_shards
SELECT shard, epoch, expires_at FROM pgsched.acquire_shards(%(scanner)s, %(lease)s::interval, p_now => %(now)s);

-- name: scan_shard
SELECT expired, promoted FROM pgsched.scan_shard(%(scanner)s, %(shard)s, %(epoch)s, p_now => %(now)s);

-- name: upsert_schedule
SELECT pgsched.upsert_schedule(
    %(name)s, %(cron)s, %(task)s, timezone => %(timezone)s, queue => %(queue)s,
    gap_policy => %(gap_policy)s, overlap_policy => %(overlap_policy)s,
    misfire_policy => %(misfire_policy)s, misfire_cap => %(misfire_cap)s,
    misfire_grace => %(misfire_grace)s::interval, concurrency => %(concurrency)s,
    horizon => %(horizon)s::interval) AS version;

-- name: remove_schedule
SELECT pgsched.remove_schedule(%(name)s, p_now => %(now)s) AS withdrawn;

-- name: schedule
-- What a scanner reads to expand a schedule (the columns of its own query).
SELECT name, cron, timezone, enabled, gap_policy, overlap_policy, misfire_policy, misfire_cap,
       misfire_grace, horizon, shard, version, expanded_version, expanded_until
FROM pgsched.schedules WHERE name = %(name)s;

-- name: add_occurrences
SELECT pgsched.add_occurrences(%(scanner)s, %(shard)s, %(epoch)s, %(name)s, %(version)s, %(plan)s,
                               %(start)s, %(until)s, p_now => %(now)s) AS created;

-- name: occurrences
SELECT o.schedule, o.fire_at, o.nominal, o.dst, o.decision, o.reason, o.job_id,
       coalesce(j.state::text, h.state::text) AS state, h.started_at, h.error
FROM pgsched.schedule_occurrences o
LEFT JOIN pgsched.jobs j ON j.id = o.job_id
LEFT JOIN pgsched.job_history h ON h.id = o.job_id
WHERE o.schedule = ANY(%(names)s::text[])
ORDER BY o.schedule, o.fire_at;

-- name: blocked
-- Whether a backend waits for a lock another backend holds.
SELECT pg_catalog.cardinality(pg_catalog.pg_blocking_pids(%(pid)s)) > 0 AS blocked;
