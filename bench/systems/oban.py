"""Oban for Python (``oban``, the open-source edition, psycopg 3, async), in its own interpreter.

Oban needs Python >= 3.12, so this system runs in bench/.venv-py312 (``venv``):
its probe, schema install, measurements and worker processes all use that
virtualenv's interpreter. Schema from ``oban.schema.install()``. Enqueue with
``Oban.enqueue`` / ``Oban.enqueue_many`` on an instance in client mode (no
queues); workers are an ``Oban`` instance with one queue, ``bench``, whose
limit (jobs running at once, also the most one fetch takes) is 10 — the
documented default — or 100. A finished job stays in ``oban_jobs`` as
``completed`` (the pruner removes it a day later). Jobs due later are
``scheduled`` and become available when the stager runs (every second by
default; its ``interval`` is documented).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bench.systems.base import Caps, DrainConfig, EnqueueVariant, Producer, System, chunks

if TYPE_CHECKING:
    from bench.harness.workers import WorkerContext


@contextlib.asynccontextmanager
async def open_oban(dsn: str, **options: Any) -> AsyncIterator[Any]:
    """A started Oban instance on a pool of its own (client mode unless ``queues`` is given), stopped on exit."""
    from oban import Oban

    pool = await Oban.create_pool(dsn)
    try:
        async with Oban(pool=pool, **options) as oban:
            yield oban
    finally:
        await pool.close()


def _options(config: DrainConfig) -> dict[str, Any]:
    """Oban's constructor options for a worker configuration."""
    from bench.apps.oban_app import QUEUE

    options: dict[str, Any] = {"queues": {QUEUE: int(config.settings.get("limit", 10))}}
    if "stager_interval" in config.settings:
        options["stager"] = {"interval": float(config.settings["stager_interval"])}
    return options


#: Far-future backlog rows as Oban's insert writes them for a job due in 30 days (table defaults elsewhere).
FAR_FUTURE_SQL = """
INSERT INTO oban_jobs (worker, queue, args, state, scheduled_at)
SELECT %(worker)s, %(queue)s, jsonb_build_object('i', i), 'scheduled', timezone('UTC', now()) + interval '30 days'
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
"""


class ObanSystem(System):
    """Oban for Python, one queue of limit 10 (its default) or 100."""

    name = "oban"
    title = "Oban for Python"
    role = "peer"
    database = "bench_oban"
    modules = ("oban", "psycopg", "psycopg_pool")
    distributions = ("oban", "psycopg", "psycopg-binary", "psycopg-pool")
    venv = "py312"
    truncate_tables = ("oban_jobs", "oban_producers", "oban_leaders")
    unfinished_sql = "SELECT EXISTS (SELECT 1 FROM oban_jobs WHERE state <> 'completed')"
    finished_sql = "SELECT count(*) FROM oban_jobs WHERE state = 'completed'"
    queued_sql = "SELECT count(*) FROM oban_jobs WHERE state = 'available'"
    # scheduled_at and attempted_at are UTC timestamps without a time zone.
    due_times_sql = (
        "SELECT (args->>'i')::int, extract(epoch FROM scheduled_at AT TIME ZONE 'UTC')::float8 FROM oban_jobs"
    )
    db_start_lag_sql = (
        "SELECT (args->>'i')::int, extract(epoch FROM attempted_at - scheduled_at)::float8 FROM oban_jobs"
        " WHERE attempted_at IS NOT NULL"
    )
    unfinished_due_sql = (
        "SELECT EXISTS (SELECT 1 FROM oban_jobs WHERE state <> 'completed' AND scheduled_at <= timezone('UTC', now()))"
    )

    async def install(self, dsn: str, caps: Caps) -> str:
        from oban import Oban
        from oban.schema import install

        pool = await Oban.create_pool(dsn)
        try:
            await install(pool)
        finally:
            await pool.close()
        return "oban.schema.install()"

    def enqueue_variants(self, caps: Caps) -> list[EnqueueVariant]:
        return [
            EnqueueVariant("one", "Oban.enqueue()", "one-by-one"),
            EnqueueVariant("batch", "Oban.enqueue_many(), batches of {batch}", "batch", batch=1000),
        ]

    async def enqueue(self, dsn: str, variant: EnqueueVariant, n: int, caps: Caps) -> float:
        from bench.apps.oban_app import new

        async with open_oban(dsn) as oban:
            if variant.batch == 1:
                started = time.perf_counter()
                for i in range(n):
                    await oban.enqueue(new(i))
                return time.perf_counter() - started
            batches = [[new(i) for i in r] for r in chunks(n, variant.batch)]
            started = time.perf_counter()
            for jobs in batches:
                await oban.enqueue_many(jobs)
            return time.perf_counter() - started

    async def prefill(self, dsn: str, n: int, caps: Caps) -> None:
        from bench.apps.oban_app import new

        async with open_oban(dsn) as oban:
            for r in chunks(n, 5000):
                await oban.enqueue_many([new(i) for i in r])

    def drain_configs(self, caps: Caps) -> list[DrainConfig]:
        return [
            DrainConfig(
                "l10x1", "queue limit 10", 1, {"limit": 10}, default=True, quick=True, concurrency="10", claim="≤ 10"
            ),
            DrainConfig(
                "l100x1", "queue limit 100", 1, {"limit": 100}, quick=True, big=True, concurrency="100", claim="≤ 100"
            ),
            DrainConfig("l100x2", "queue limit 100", 2, {"limit": 100}, concurrency="100", claim="≤ 100"),
        ]

    def latency_config(self, caps: Caps) -> DrainConfig:
        return DrainConfig("l10", "queue limit 10 (default)", 1, {"limit": 10})

    def delayed_configs(self, caps: Caps) -> list[DrainConfig]:
        return [
            DrainConfig("stage1", "queue limit 10, scheduled_at; stager every 1 s (default)", 1, {"limit": 10}),
            DrainConfig(
                "stage01", "queue limit 10, scheduled_at; stager every 0.1 s", 1, {"limit": 10, "stager_interval": 0.1}
            ),
        ]

    async def enqueue_at(self, dsn: str, jobs: list[tuple[int, datetime]], caps: Caps) -> None:
        from bench.apps.oban_app import new

        async with open_oban(dsn) as oban:
            await oban.enqueue_many([new(i, scheduled_at=at) for i, at in jobs])

    async def prefill_far_future(self, dsn: str, n: int, caps: Caps) -> None:
        """The rows ``enqueue_many(... scheduled_in=30 days)`` would write, inserted set-based.

        Oban inserts one row per statement, which would take most of an hour
        for 1,000,000 rows on a busy 2-core machine; the scale scenario measures
        the drain beside the backlog, not how it was built.
        """
        import psycopg
        from oban.worker import worker_name

        from bench.apps.oban_app import QUEUE, Noop

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for r in chunks(n, 50_000):
                await conn.execute(
                    FAR_FUTURE_SQL, {"worker": worker_name(Noop), "queue": QUEUE, "first": r.start, "last": r.stop - 1}
                )

    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        asyncio.run(self._worker(dsn, config, ctx))

    @staticmethod
    async def _worker(dsn: str, config: DrainConfig, ctx: WorkerContext) -> None:
        from oban import Oban

        from bench.apps import oban_app

        oban_app.hit = ctx.hit
        pool = await Oban.create_pool(dsn)
        try:
            oban = Oban(pool=pool, **_options(config))
            ctx.ready_and_wait()
            await oban.start()
            try:
                await ctx.wait_stop()
            finally:
                await oban.stop()
        finally:
            await pool.close()

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str, caps: Caps) -> AsyncIterator[Producer]:
        async with open_oban(dsn) as oban:
            yield _Producer(oban)


class _Producer:
    def __init__(self, oban: Any) -> None:
        self._oban = oban

    async def enqueue(self, i: int) -> None:
        from bench.apps.oban_app import new

        await self._oban.enqueue(new(i))


SYSTEM = ObanSystem()
