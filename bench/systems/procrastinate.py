"""Procrastinate (psycopg 3, async): ``defer_async`` / ``batch_defer_async`` and ``run_worker_async``.

Schema from its own ``schema_manager.apply_schema_async()``. The worker runs as
an asyncio task and is stopped by cancelling it, as procrastinate's docs
describe for embedding a worker. Its default concurrency is 1; 10 is the tuned
setting (throughput is flat from 4 to 50 because one fetch is in flight at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bench.systems.base import Caps, DrainConfig, EnqueueVariant, Producer, System, chunks

if TYPE_CHECKING:
    from procrastinate import App

    from bench.harness.workers import WorkerContext


def _ignore(i: int) -> None:
    return None


#: Set by the worker process to its ``ctx.hit``.
hit: Callable[[int], None] = _ignore


def make_app(dsn: str) -> tuple[App, Any]:
    """An app on ``dsn`` with the no-op task registered; returns (app, task)."""
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop(i: int = 0) -> None:
        hit(i)

    return app, noop


class ProcrastinateSystem(System):
    """procrastinate, at its default concurrency and at 10."""

    name = "procrastinate"
    title = "procrastinate"
    role = "peer"
    database = "bench_procrastinate"
    modules = ("procrastinate",)
    distributions = ("procrastinate", "psycopg", "psycopg-pool")
    truncate_tables = (
        "procrastinate_jobs",
        "procrastinate_events",
        "procrastinate_periodic_defers",
        "procrastinate_workers",
    )
    unfinished_sql = "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status <> 'succeeded')"
    finished_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
    queued_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'"
    due_times_sql = (
        "SELECT (args->>'i')::int, extract(epoch FROM scheduled_at)::float8 FROM procrastinate_jobs"
        " WHERE scheduled_at IS NOT NULL"
    )
    # The 'started' event is written by the fetch, at the database's now().
    db_start_lag_sql = (
        "SELECT (j.args->>'i')::int, extract(epoch FROM e.at - j.scheduled_at)::float8"
        " FROM procrastinate_events e JOIN procrastinate_jobs j ON j.id = e.job_id"
        " WHERE e.type = 'started' AND j.scheduled_at IS NOT NULL"
    )

    async def install(self, dsn: str, caps: Caps) -> str:
        import psycopg

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cur = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
            row = await cur.fetchone()
            if row and row[0]:
                return "already installed"
        app, _ = make_app(dsn)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
        return "app.schema_manager.apply_schema_async()"

    def enqueue_variants(self, caps: Caps) -> list[EnqueueVariant]:
        return [
            EnqueueVariant("one", "defer_async()", "one-by-one"),
            EnqueueVariant("batch", "batch_defer_async(), batches of {batch}", "batch", batch=1000),
        ]

    async def enqueue(self, dsn: str, variant: EnqueueVariant, n: int, caps: Caps) -> float:
        app, noop = make_app(dsn)
        async with app.open_async():
            if variant.batch == 1:
                started = time.perf_counter()
                for i in range(n):
                    await noop.defer_async(i=i)
                return time.perf_counter() - started
            batches = [[{"i": i} for i in r] for r in chunks(n, variant.batch)]
            started = time.perf_counter()
            for batch in batches:
                await noop.batch_defer_async(*batch)
            return time.perf_counter() - started

    async def prefill(self, dsn: str, n: int, caps: Caps) -> None:
        app, noop = make_app(dsn)
        async with app.open_async():
            for r in chunks(n, 1000):
                await noop.batch_defer_async(*({"i": i} for i in r))

    def drain_configs(self, caps: Caps) -> list[DrainConfig]:
        return [
            DrainConfig("c1x1", "concurrency 1", 1, {"concurrency": 1}, default=True, concurrency="1", claim="1"),
            DrainConfig(
                "c10x1", "concurrency 10", 1, {"concurrency": 10}, quick=True, big=True, concurrency="10", claim="1"
            ),
            DrainConfig("c10x2", "concurrency 10", 2, {"concurrency": 10}, concurrency="10", claim="1"),
        ]

    def latency_config(self, caps: Caps) -> DrainConfig:
        return DrainConfig("c10", "concurrency 10, listen_notify (default)", 1, {"concurrency": 10})

    def delayed_configs(self, caps: Caps) -> list[DrainConfig]:
        return [
            DrainConfig("c10", "concurrency 10, schedule_at; fetch polling every 5 s (default)", 1, {"concurrency": 10})
        ]

    async def enqueue_at(self, dsn: str, jobs: list[tuple[int, datetime]], caps: Caps) -> None:
        app, noop = make_app(dsn)
        async with app.open_async():
            for i, at in jobs:
                await noop.configure(schedule_at=at).defer_async(i=i)

    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        global hit
        hit = ctx.hit
        asyncio.run(self._worker(dsn, config, ctx))

    @staticmethod
    async def _worker(dsn: str, config: DrainConfig, ctx: WorkerContext) -> None:
        app, _ = make_app(dsn)
        async with app.open_async():
            ctx.ready_and_wait()
            task = asyncio.create_task(
                app.run_worker_async(
                    concurrency=int(config.settings["concurrency"]),
                    install_signal_handlers=False,
                )
            )
            await ctx.wait_stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=10)

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str, caps: Caps) -> AsyncIterator[Producer]:
        app, noop = make_app(dsn)
        async with app.open_async():
            yield _Producer(noop)


class _Producer:
    def __init__(self, task: Any) -> None:
        self._task = task

    async def enqueue(self, i: int) -> None:
        await self._task.defer_async(i=i)


SYSTEM = ProcrastinateSystem()
