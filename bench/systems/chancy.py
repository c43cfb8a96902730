"""Chancy (psycopg 3, async): ``push`` / ``push_many`` and a ``Worker`` with its default plugins.

Schema from ``Chancy.migrate()``. The benchmark queue uses the asyncio executor
at its default concurrency (100) with ``eager_polling`` — the tuned setting.
Chancy's out-of-the-box queue (process-pool executor, 5 s polling, no eager
polling) drains one batch per polling interval from a pre-filled queue, so it
is not measured. Job updates are flushed by the worker about once a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bench.systems.base import Caps, DrainConfig, EnqueueVariant, Producer, System, chunks

if TYPE_CHECKING:
    from chancy import Chancy

    from bench.harness.workers import WorkerContext

QUEUE = "bench"


def _ignore(i: int) -> None:
    return None


#: Set by the worker process to its ``ctx.hit``.
hit: Callable[[int], None] = _ignore


async def noop(i: int = 0) -> None:
    """The no-op job (imported by Chancy's worker as ``bench.systems.chancy.noop``)."""
    hit(i)


def _quiet_logger() -> logging.Logger:
    log = logging.getLogger("bench.chancy")
    log.setLevel(logging.WARNING)
    return log


def make_chancy(dsn: str) -> Chancy:
    """A Chancy app with its default plugins and a quiet logger."""
    from chancy import Chancy

    return Chancy(dsn, log=_quiet_logger())


def _job(i: int) -> Any:
    from chancy import Job

    return Job.from_func(noop, queue=QUEUE, kwargs={"i": i})


class ChancySystem(System):
    """Chancy, asyncio executor, concurrency 100, eager polling."""

    name = "chancy"
    title = "Chancy"
    role = "peer"
    database = "bench_chancy"
    modules = ("chancy",)
    distributions = ("chancy", "psycopg", "psycopg-pool")
    truncate_tables = ("chancy_jobs", "chancy_workers")
    unfinished_sql = "SELECT EXISTS (SELECT 1 FROM chancy_jobs WHERE state <> 'succeeded')"
    finished_sql = "SELECT count(*) FROM chancy_jobs WHERE state = 'succeeded'"
    queued_sql = "SELECT count(*) FROM chancy_jobs WHERE state = 'pending'"
    due_times_sql = "SELECT (kwargs->>'i')::int, extract(epoch FROM scheduled_at)::float8 FROM chancy_jobs"

    async def install(self, dsn: str, caps: Caps) -> str:
        from chancy import Chancy, Queue

        async with make_chancy(dsn) as chancy:
            await chancy.migrate()
            await chancy.declare(
                Queue(QUEUE, executor=Chancy.Executor.Async, concurrency=100, eager_polling=True),
                upsert=True,
            )
        return "Chancy.migrate() + declare(Queue(asyncio executor, concurrency 100, eager_polling))"

    def enqueue_variants(self, caps: Caps) -> list[EnqueueVariant]:
        return [
            EnqueueVariant("one", "push()", "one-by-one"),
            EnqueueVariant("batch", "push_many(), batches of {batch}", "batch", batch=1000),
        ]

    async def enqueue(self, dsn: str, variant: EnqueueVariant, n: int, caps: Caps) -> float:
        async with make_chancy(dsn) as chancy:
            await chancy.pool.open()
            if variant.batch == 1:
                started = time.perf_counter()
                for i in range(n):
                    await chancy.push(_job(i))
                return time.perf_counter() - started
            jobs = [_job(i) for i in range(n)]
            started = time.perf_counter()
            async for _refs in chancy.push_many(jobs, batch_size=variant.batch):
                pass
            return time.perf_counter() - started

    async def prefill(self, dsn: str, n: int, caps: Caps) -> None:
        async with make_chancy(dsn) as chancy:
            for r in chunks(n, 5000):
                async for _refs in chancy.push_many([_job(i) for i in r], batch_size=1000):
                    pass

    def drain_configs(self, caps: Caps) -> list[DrainConfig]:
        label = "asyncio executor, concurrency 100, eager polling"
        return [
            DrainConfig("c100x1", label, 1, quick=True, big=True, concurrency="100", claim="≤ 100"),
            DrainConfig("c100x2", label, 2, concurrency="100", claim="≤ 100"),
        ]

    def latency_config(self, caps: Caps) -> DrainConfig:
        return DrainConfig("c100", "asyncio executor, concurrency 100", 1)

    def delayed_configs(self, caps: Caps) -> list[DrainConfig]:
        return [DrainConfig("c100", "asyncio executor, concurrency 100, scheduled_at; polling every 5 s (default)", 1)]

    async def enqueue_at(self, dsn: str, jobs: list[tuple[int, datetime]], caps: Caps) -> None:
        async with make_chancy(dsn) as chancy:
            await chancy.pool.open()
            async for _refs in chancy.push_many([_job(i).with_scheduled_at(at) for i, at in jobs], batch_size=1000):
                pass

    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        global hit
        hit = ctx.hit
        asyncio.run(self._worker(dsn, ctx))

    @staticmethod
    async def _worker(dsn: str, ctx: WorkerContext) -> None:
        from chancy import Worker

        async with make_chancy(dsn) as chancy:
            await chancy.pool.open()
            worker = Worker(chancy, register_signal_handlers=False)
            ctx.ready_and_wait()
            await worker.start()
            await ctx.wait_stop()
            await worker.stop(timeout=10)

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str, caps: Caps) -> AsyncIterator[Producer]:
        async with make_chancy(dsn) as chancy:
            await chancy.pool.open()
            yield _Producer(chancy)


class _Producer:
    def __init__(self, chancy: Chancy) -> None:
        self._chancy = chancy

    async def enqueue(self, i: int) -> None:
        await self._chancy.push(_job(i))


SYSTEM = ChancySystem()
