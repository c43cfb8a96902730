"""What the dashboard reads and does in the database: its SQL, run over an asyncio connection pool."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final, LiteralString

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from pgsched.core.job import ACTIVE_STATES as JOB_ACTIVE_STATES
from pgsched.core.job import TERMINAL_STATES
from pgsched.db import queries
from pgsched.db.replica import replica_state_async
from pgsched.observe.metrics import QueueSnapshot, read_snapshot_async

ACTIVE_STATES: Final = JOB_ACTIVE_STATES
FINISHED_STATES: Final = TERMINAL_STATES
STATES: Final = ACTIVE_STATES + FINISHED_STATES

# The bulk actions, one statement each: the matching ids into cancel_many()/retry_many().
BULK_ACTIONS: Final[Mapping[str, LiteralString]] = {
    "cancel": queries.DASHBOARD_BULK_CANCEL,
    "retry": queries.DASHBOARD_BULK_RETRY,
}

# Actions, each one SQL function call that reports what it did.
ACTIONS: Final[Mapping[str, LiteralString]] = {
    "cancel_job": queries.CANCEL_JOB,
    "retry_job": queries.RETRY_JOB,
    "pause_queue": queries.DASHBOARD_PAUSE_QUEUE,
    "resume_queue": queries.DASHBOARD_RESUME_QUEUE,
    "pause_schedule": queries.DASHBOARD_PAUSE_SCHEDULE,
    "resume_schedule": queries.DASHBOARD_RESUME_SCHEDULE,
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
            "workers": await self.rows(queries.WORKERS_LIVE),
            "scanners": await self.rows(queries.DASHBOARD_SCANNERS),
            "shard_leases": await self.rows(queries.DASHBOARD_SHARD_LEASES),
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
        jobs = await self.rows(queries.DASHBOARD_QUEUE_JOBS, params)
        return {"queue": queue, "stats": stats, "state": state, **_page(jobs, limit)}

    async def job(self, job_id: int) -> dict[str, Any] | None:
        job = await self.row(queries.DASHBOARD_JOB, {"id": job_id})
        if job is None:
            return None
        return {
            "job": job,
            "events": await self.rows(queries.JOB_TIMELINE, {"id": job_id}),
            "history": await self.rows(queries.DASHBOARD_JOB_RUNS, {"id": job_id}),
        }

    async def dead_letters(self, *, queue: str | None, before: int | None, limit: int) -> dict[str, Any]:
        rows = await self.rows(queries.DASHBOARD_DEAD_LETTERS, {"queue": queue, "before": before, "limit": limit + 1})
        counts = await self.rows(queries.DASHBOARD_DEAD_LETTER_COUNTS)
        return {"queue": queue, "counts": counts, **_page(rows, limit, key="dead_letters")}

    async def schedules(self, *, schedule: str | None, limit: int) -> dict[str, Any]:
        return {
            "schedule": schedule,
            "schedules": await self.rows(queries.SCHEDULE_STATUS),
            "occurrences": await self.rows(queries.DASHBOARD_OCCURRENCES, {"schedule": schedule, "limit": limit}),
        }

    async def history(self, *, queue: str | None, span: timedelta, bucket: timedelta) -> dict[str, Any]:
        """The rollup of one queue (or all) over the last span, in buckets; with the database's now."""
        points = await self.rows(queries.DASHBOARD_HISTORY, {"queue": queue, "window": span, "bucket": bucket})
        now = await self.row(queries.DASHBOARD_NOW)
        assert now is not None
        return {"queue": queue, "now": now["now"], "points": points}

    async def search(self, filters: Mapping[str, Any], *, before: int | None, limit: int) -> dict[str, Any]:
        """A page of the jobs matching filters (the parameters of pgsched.find_jobs), newest first."""
        rows = await self.rows(
            queries.DASHBOARD_SEARCH_JOBS, {**filters, "before": before, "max_id": None, "limit": limit + 1}
        )
        return _page(rows, limit)

    async def bulk_preview(self, filters: Mapping[str, Any], *, cap: int) -> list[Row]:
        """The jobs a bulk action on filters would touch, by state (at most cap + 1 read), with their max id."""
        return await self.rows(queries.DASHBOARD_BULK_PREVIEW, {**filters, "max_id": None, "limit": cap + 1})

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
