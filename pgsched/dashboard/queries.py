"""What the dashboard reads and does in the database: its SQL, run over an asyncio connection pool."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final, LiteralString

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from pgsched.db import queries
from pgsched.db.replica import replica_state_async
from pgsched.observe.metrics import QueueSnapshot, read_snapshot_async

ACTIVE_STATES: Final = ("scheduled", "waiting", "available", "running")
FINISHED_STATES: Final = ("completed", "dead", "cancelled")
STATES: Final = ACTIVE_STATES + FINISHED_STATES

WORKERS: Final[LiteralString] = """
SELECT w.name, w.host, w.pid, w.queues, w.labels, w.concurrency, w.running, w.claimed, w.started_at, w.last_seen,
       w.seen_s_ago, w.version
FROM pgsched.workers_live w
ORDER BY w.name
"""

SCANNERS: Final[LiteralString] = """
SELECT s.name, s.host, s.pid, s.started_at, s.last_seen,
       EXTRACT(EPOCH FROM pg_catalog.now() - s.last_seen)::double precision AS seen_s_ago,
       (SELECT pg_catalog.count(*) FROM pgsched.shard_leases l
        WHERE l.owner = s.name AND l.expires_at > pg_catalog.now()) AS shards
FROM pgsched.scanners s
ORDER BY s.name
"""

SHARD_LEASES: Final[LiteralString] = """
SELECT l.shard, l.owner, l.epoch, l.expires_at, l.renewed_at,
       EXTRACT(EPOCH FROM l.expires_at - pg_catalog.now())::double precision AS expires_in_s
FROM pgsched.shard_leases l
ORDER BY l.shard
"""

# One page of a queue's jobs, newest id first: active rows, and each finished
# job's latest history row (a redriven job has several; an active one none).
QUEUE_JOBS: Final[LiteralString] = """
WITH active AS (
    SELECT j.id, j.state::text AS state, j.task, pg_catalog.left(j.args::text, 160) AS args, j.priority,
           j.attempt, j.max_attempts, j.run_at, j.leased_by AS worker, j.last_error AS error,
           j.created_at, NULL::timestamptz AS finished_at, j.progress, j.progress_note,
           CASE WHEN j.state = 'running' THEN
               EXTRACT(EPOCH FROM pg_catalog.now() - coalesce(j.started_at, j.claimed_at))::double precision
           END AS elapsed_s
    FROM pgsched.jobs j
    WHERE j.queue = %(queue)s
      AND (%(state)s::text IS NULL OR j.state::text = %(state)s::text)
      AND (%(state)s::text IS NULL OR %(state)s::text IN ('scheduled', 'waiting', 'available', 'running'))
      AND (%(before)s::bigint IS NULL OR j.id < %(before)s::bigint)
    ORDER BY j.id DESC
    LIMIT %(limit)s
), finished AS (
    SELECT h.id, h.state::text AS state, h.task, pg_catalog.left(h.args::text, 160) AS args, h.priority,
           h.attempt, h.max_attempts, h.run_at, h.leased_by AS worker, h.error, h.created_at, h.finished_at,
           h.progress, h.progress_note, NULL::double precision AS elapsed_s
    FROM pgsched.job_history h
    WHERE h.queue = %(queue)s
      AND (%(state)s::text IS NULL OR h.state::text = %(state)s::text)
      AND (%(state)s::text IS NULL OR %(state)s::text IN ('completed', 'dead', 'cancelled'))
      AND (%(before)s::bigint IS NULL OR h.id < %(before)s::bigint)
      AND NOT EXISTS (SELECT 1 FROM pgsched.job_history n WHERE n.id = h.id AND n.finished_at > h.finished_at)
      AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
    ORDER BY h.id DESC
    LIMIT %(limit)s
)
SELECT * FROM active
UNION ALL
SELECT * FROM finished
ORDER BY id DESC
LIMIT %(limit)s
"""

JOB_EVENTS: Final[LiteralString] = """
SELECT e.at, e.kind, e.attempt, e.worker, e.token, e.detail
FROM pgsched.job_timeline e
WHERE e.job_id = %(id)s
"""

# Earlier runs of a redriven job (every history row), newest first.
JOB_HISTORY: Final[LiteralString] = """
SELECT h.state::text AS state, h.attempt, h.started_at, h.finished_at, h.leased_by AS worker, h.error
FROM pgsched.job_history h
WHERE h.id = %(id)s
ORDER BY h.finished_at DESC
"""

DEAD_LETTERS: Final[LiteralString] = """
SELECT d.id, d.queue, d.task, pg_catalog.left(d.args::text, 160) AS args, d.attempt, d.max_attempts, d.error,
       d.died_at, d.last_worker
FROM pgsched.dead_letters d
WHERE (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
  AND (%(before)s::bigint IS NULL OR d.id < %(before)s::bigint)
ORDER BY d.id DESC
LIMIT %(limit)s
"""

DEAD_LETTER_COUNTS: Final[LiteralString] = """
SELECT d.queue, pg_catalog.count(*) AS n FROM pgsched.dead_letters d GROUP BY d.queue ORDER BY d.queue
"""

SCHEDULES: Final[LiteralString] = "SELECT * FROM pgsched.schedule_status ORDER BY name"

OCCURRENCES: Final[LiteralString] = """
SELECT o.schedule, o.fire_at, o.nominal, o.dst, o.decision, o.reason, o.job_id, o.version, o.decided_at
FROM pgsched.schedule_occurrences o
WHERE %(schedule)s::text IS NULL OR o.schedule = %(schedule)s::text
ORDER BY o.decided_at DESC, o.fire_at DESC
LIMIT %(limit)s
"""

# Charts: the per-minute rollup (pgsched.queue_history) of one queue or of all
# of them, in buckets of %(bucket)s over the last %(window)s. Counts add up;
# depth is the largest sampled in the bucket; lag and run time percentiles the
# worst of the bucket (percentiles of different minutes do not add up). The
# first bucket is the oldest of the window's whole ones, as charts.buckets lays them.
HISTORY: Final[LiteralString] = """
WITH minutes AS (
    SELECT h.minute,
           pg_catalog.sum(h.completed) AS completed, pg_catalog.sum(h.failed) AS failed,
           pg_catalog.sum(h.dead) AS dead, pg_catalog.sum(h.expired) AS expired,
           pg_catalog.sum(h.cancelled) AS cancelled,
           pg_catalog.sum(h.available) AS available, pg_catalog.sum(h.running) AS running,
           pg_catalog.sum(h.scheduled) AS scheduled,
           pg_catalog.max(h.lag_p50_s) AS lag_p50_s, pg_catalog.max(h.lag_p95_s) AS lag_p95_s,
           pg_catalog.max(h.run_p95_s) AS run_p95_s
    FROM pgsched.queue_history h
    WHERE h.minute >= pg_catalog.date_bin(%(bucket)s::interval, pg_catalog.now(), timestamptz '2000-01-01 00:00:00+00')
                      - %(window)s::interval + %(bucket)s::interval
      AND (%(queue)s::text IS NULL OR h.queue = %(queue)s::text)
    GROUP BY h.minute
)
SELECT pg_catalog.date_bin(%(bucket)s::interval, m.minute, timestamptz '2000-01-01 00:00:00+00') AS at,
       pg_catalog.sum(m.completed)::bigint AS completed, pg_catalog.sum(m.failed)::bigint AS failed,
       pg_catalog.sum(m.dead)::bigint AS dead, pg_catalog.sum(m.expired)::bigint AS expired,
       pg_catalog.sum(m.cancelled)::bigint AS cancelled,
       pg_catalog.max(m.available)::bigint AS available, pg_catalog.max(m.running)::bigint AS running,
       pg_catalog.max(m.scheduled)::bigint AS scheduled,
       pg_catalog.max(m.lag_p50_s) AS lag_p50_s, pg_catalog.max(m.lag_p95_s) AS lag_p95_s,
       pg_catalog.max(m.run_p95_s) AS run_p95_s
FROM minutes m
GROUP BY 1
ORDER BY 1
"""

DB_NOW: Final[LiteralString] = "SELECT pg_catalog.now() AS now"

# The job search across queues (pgsched.find_jobs: every filter optional,
# keyset pagination on id, newest first).
SEARCH_JOBS: Final[LiteralString] = """
SELECT f.id, f.queue, f.state, f.task, pg_catalog.left(f.args::text, 160) AS args, f.priority, f.attempt,
       f.max_attempts, f.run_at, f.worker, f.error, f.tenant, f.created_at, f.finished_at
FROM pgsched.find_jobs(
    p_task => %(task)s, p_states => %(states)s::text[], p_queue => %(queue)s, p_tenant => %(tenant)s,
    p_args => %(args)s::jsonb,
    p_since => coalesce(%(since)s::timestamptz, pg_catalog.now() - %(since_ago)s::interval),
    p_until => coalesce(%(until)s::timestamptz, pg_catalog.now() - %(until_ago)s::interval),
    p_time => %(field)s, p_before => %(before)s::bigint, p_max_id => %(max_id)s::bigint, p_limit => %(limit)s) f
"""

# What a bulk action would touch: the matching jobs by state, and the largest
# id (the bound the confirmed action keeps to).
BULK_PREVIEW: Final[LiteralString] = """
SELECT f.state, pg_catalog.count(*) AS n, pg_catalog.max(f.id) AS max_id
FROM pgsched.find_jobs(
    p_task => %(task)s, p_states => %(states)s::text[], p_queue => %(queue)s, p_tenant => %(tenant)s,
    p_args => %(args)s::jsonb,
    p_since => coalesce(%(since)s::timestamptz, pg_catalog.now() - %(since_ago)s::interval),
    p_until => coalesce(%(until)s::timestamptz, pg_catalog.now() - %(until_ago)s::interval),
    p_time => %(field)s, p_before => NULL, p_max_id => %(max_id)s::bigint, p_limit => %(limit)s) f
GROUP BY f.state
ORDER BY f.state
"""

# The bulk actions, one statement each: the matching ids into cancel_many()/retry_many().
BULK_ACTIONS: Final[Mapping[str, LiteralString]] = {
    "cancel": """
SELECT b.result, pg_catalog.count(*) AS n
FROM pgsched.cancel_many(ARRAY(SELECT f.id FROM pgsched.find_jobs(
    p_task => %(task)s, p_states => %(states)s::text[], p_queue => %(queue)s, p_tenant => %(tenant)s,
    p_args => %(args)s::jsonb,
    p_since => coalesce(%(since)s::timestamptz, pg_catalog.now() - %(since_ago)s::interval),
    p_until => coalesce(%(until)s::timestamptz, pg_catalog.now() - %(until_ago)s::interval),
    p_time => %(field)s, p_before => NULL, p_max_id => %(max_id)s::bigint, p_limit => %(limit)s) f)) b
GROUP BY b.result
ORDER BY b.result
""",
    "retry": """
SELECT b.result, pg_catalog.count(*) AS n
FROM pgsched.retry_many(ARRAY(SELECT f.id FROM pgsched.find_jobs(
    p_task => %(task)s, p_states => %(states)s::text[], p_queue => %(queue)s, p_tenant => %(tenant)s,
    p_args => %(args)s::jsonb,
    p_since => coalesce(%(since)s::timestamptz, pg_catalog.now() - %(since_ago)s::interval),
    p_until => coalesce(%(until)s::timestamptz, pg_catalog.now() - %(until_ago)s::interval),
    p_time => %(field)s, p_before => NULL, p_max_id => %(max_id)s::bigint, p_limit => %(limit)s) f)) b
GROUP BY b.result
ORDER BY b.result
""",
}

# Actions, each one SQL function call that reports what it did.
ACTIONS: Final[Mapping[str, LiteralString]] = {
    "cancel_job": "SELECT pgsched.cancel(%s::bigint)::text AS result",
    "retry_job": "SELECT pgsched.retry(%s::bigint)::text AS result",
    "pause_queue": "SELECT CASE WHEN pgsched.pause_queue(%s::text) THEN 'paused' END AS result",
    "resume_queue": """
        SELECT CASE WHEN pgsched.resume_queue(%s::text) THEN 'resumed' ELSE 'was_not_paused' END AS result
    """,
    "pause_schedule": """
        SELECT CASE WHEN pgsched.pause_schedule(%s::text) THEN 'paused' ELSE 'not_found' END AS result
    """,
    "resume_schedule": """
        SELECT CASE WHEN pgsched.resume_schedule(%s::text) THEN 'resumed' ELSE 'not_found' END AS result
    """,
}

Row = dict[str, Any]


class Store:
    """The dashboard's reads and actions, over an AsyncConnectionPool (open() before use, close() after).

    With read_dsn (a streaming replica) the reads go to a pool of their own there, the actions to dsn.
    """

    def __init__(self, dsn: str, *, read_dsn: str | None = None, max_size: int = 4, timeout: float = 10.0) -> None:
        self.pool = self._pool(dsn, max_size, timeout, "pgsched-dashboard")
        self.read_dsn = read_dsn
        self.read_pool = (
            self.pool if read_dsn is None else self._pool(read_dsn, max_size, timeout, "pgsched-dashboard-read")
        )

    @staticmethod
    def _pool(dsn: str, max_size: int, timeout: float, name: str) -> AsyncConnectionPool[Any]:
        return AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=max_size,
            open=False,
            timeout=timeout,  # seconds a request waits for a connection before it answers 503
            check=AsyncConnectionPool.check_connection,
            kwargs={"autocommit": True, "application_name": name},
            name=name,
        )

    async def open(self) -> None:
        await self.pool.open(wait=False)
        if self.read_pool is not self.pool:
            await self.read_pool.open(wait=False)

    async def close(self) -> None:
        if self.read_pool is not self.pool:
            await self.read_pool.close()
        await self.pool.close()

    async def replica(self) -> dict[str, Any] | None:
        """Whether the read server is a standby and how far behind it is (None without read_dsn)."""
        if self.read_dsn is None:
            return None
        async with self.read_pool.connection() as conn:
            return await replica_state_async(conn)

    async def rows(self, query: LiteralString, params: Mapping[str, Any] | None = None) -> list[Row]:
        async with self.read_pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query, params)
            found: list[Row] = await cur.fetchall()
            return found

    async def row(self, query: LiteralString, params: Mapping[str, Any] | None = None) -> Row | None:
        found = await self.rows(query, params)
        return found[0] if found else None

    async def snapshot(self) -> QueueSnapshot:
        async with self.read_pool.connection() as conn:
            return await read_snapshot_async(conn)

    async def overview(self) -> dict[str, Any]:
        snap = await self.snapshot()
        return {
            "queues": snap.queues,
            "workers_live": snap.workers_live,
            "workers": await self.rows(WORKERS),
            "scanners": await self.rows(SCANNERS),
            "shard_leases": await self.rows(SHARD_LEASES),
            "replica": await self.replica(),
            "policies": await self.rows(queries.QUEUE_POLICIES),
            "pools": await self.rows(queries.WORKER_POOLS),
            "unserved_labels": await self.rows(queries.UNSERVED_LABELS),
            "unserved_tasks": await self.rows(queries.UNSERVED_TASKS),
        }

    async def queue(self, queue: str, *, state: str | None, before: int | None, limit: int) -> dict[str, Any]:
        snap = await self.snapshot()
        stats = next((q for q in snap.queues if q["queue"] == queue), None)
        params = {"queue": queue, "state": state, "before": before, "limit": limit + 1}
        jobs = await self.rows(QUEUE_JOBS, params)
        return {"queue": queue, "stats": stats, "state": state, **_page(jobs, limit)}

    async def job(self, job_id: int) -> dict[str, Any] | None:
        job = await self.row(queries.DASHBOARD_JOB, {"id": job_id})
        if job is None:
            return None
        return {
            "job": job,
            "events": await self.rows(JOB_EVENTS, {"id": job_id}),
            "history": await self.rows(JOB_HISTORY, {"id": job_id}),
        }

    async def dead_letters(self, *, queue: str | None, before: int | None, limit: int) -> dict[str, Any]:
        rows = await self.rows(DEAD_LETTERS, {"queue": queue, "before": before, "limit": limit + 1})
        counts = await self.rows(DEAD_LETTER_COUNTS)
        return {"queue": queue, "counts": counts, **_page(rows, limit, key="dead_letters")}

    async def schedules(self, *, schedule: str | None, limit: int) -> dict[str, Any]:
        return {
            "schedule": schedule,
            "schedules": await self.rows(SCHEDULES),
            "occurrences": await self.rows(OCCURRENCES, {"schedule": schedule, "limit": limit}),
        }

    async def history(self, *, queue: str | None, span: timedelta, bucket: timedelta) -> dict[str, Any]:
        """The rollup of one queue (or all) over the last span, in buckets; with the database's now."""
        points = await self.rows(HISTORY, {"queue": queue, "window": span, "bucket": bucket})
        now = await self.row(DB_NOW)
        assert now is not None
        return {"queue": queue, "now": now["now"], "points": points}

    async def search(self, filters: Mapping[str, Any], *, before: int | None, limit: int) -> dict[str, Any]:
        """A page of the jobs matching filters (the parameters of pgsched.find_jobs), newest first."""
        rows = await self.rows(SEARCH_JOBS, {**filters, "before": before, "max_id": None, "limit": limit + 1})
        return _page(rows, limit)

    async def bulk_preview(self, filters: Mapping[str, Any], *, cap: int) -> list[Row]:
        """The jobs a bulk action on filters would touch, by state (at most cap + 1 read), with their max id."""
        return await self.rows(BULK_PREVIEW, {**filters, "max_id": None, "limit": cap + 1})

    async def bulk(self, verb: str, filters: Mapping[str, Any], *, max_id: int, cap: int) -> list[Row]:
        """Cancel or retry (verb) the jobs matching filters up to max_id, in one statement; results counted."""
        return await self.rows(BULK_ACTIONS[verb], {**filters, "max_id": max_id, "limit": cap})

    async def act(self, action: str, target: int | str) -> str:
        """Run one action (a key of ACTIONS) on a job id, queue or schedule name; returns what happened."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(ACTIONS[action], [target])
            found = await cur.fetchone()
        return str(found[0]) if found and found[0] is not None else "done"


def _page(rows: list[Row], limit: int, *, key: str = "jobs") -> dict[str, Any]:
    """A page of rows read with limit + 1, and the id to continue before (None on the last page)."""
    more = len(rows) > limit
    rows = rows[:limit]
    return {key: rows, "next_before": rows[-1]["id"] if more and rows else None}
