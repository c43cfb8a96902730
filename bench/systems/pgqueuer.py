"""PgQueuer, on its asyncpg driver and on its psycopg driver (two systems, one module).

Schema from ``Queries.install()``. Enqueue with ``Queries.enqueue`` (scalars for
one job, lists for a batch); workers are a ``QueueManager`` with one
``noop`` entrypoint, run with ``qm.run(batch_size=…)`` and stopped through
``qm.shutdown``. ``batch_size`` 10 is its default, 100 the tuned setting.
Finished jobs leave the queue table for ``pgqueuer_log`` (a buffered flush), so
"all persisted" means the queue table is empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from bench.systems.base import Caps, DrainConfig, EnqueueVariant, Producer, System, chunks

if TYPE_CHECKING:
    from bench.harness.workers import WorkerContext

Driver = Literal["asyncpg", "psycopg"]


@contextlib.asynccontextmanager
async def open_driver(dsn: str, driver: Driver) -> AsyncIterator[Any]:
    """A PgQueuer driver on a new connection, closed on exit."""
    if driver == "asyncpg":
        import asyncpg
        from pgqueuer import AsyncpgDriver

        conn = await asyncpg.connect(dsn)
        try:
            yield AsyncpgDriver(conn)
        finally:
            await conn.close()
    else:
        import psycopg
        from pgqueuer import PsycopgDriver

        aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            yield PsycopgDriver(aconn)
        finally:
            await aconn.close()


class PgQueuerSystem(System):
    """PgQueuer with one driver."""

    role = "peer"
    database = "bench_pgqueuer"
    truncate_tables = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")
    unfinished_sql = "SELECT EXISTS (SELECT 1 FROM pgqueuer)"
    finished_sql = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
    queued_sql = "SELECT count(*) FROM pgqueuer WHERE status = 'queued'"
    # Finished jobs leave the queue table: read right after the enqueue, while all still wait.
    due_times_sql = "SELECT convert_from(payload, 'UTF8')::int, extract(epoch FROM execute_after)::float8 FROM pgqueuer"

    def __init__(self, driver: Driver) -> None:
        self.driver: Driver = driver
        self.name = "pgqueuer" if driver == "asyncpg" else "pgqueuer-psycopg"
        self.title = f"PgQueuer, {driver}"
        self.modules = ("pgqueuer", driver)
        self.distributions = ("pgqueuer", driver)

    async def install(self, dsn: str, caps: Caps) -> str:
        from pgqueuer import Queries

        async with open_driver(dsn, self.driver) as driver:
            queries = Queries(driver)
            if await queries.schema_is_installed():
                return "already installed"
            await queries.install()
        return "Queries.install()"

    def enqueue_variants(self, caps: Caps) -> list[EnqueueVariant]:
        return [
            EnqueueVariant("one", "Queries.enqueue(), scalar", "one-by-one"),
            EnqueueVariant("batch", "Queries.enqueue(), lists of {batch}", "batch", batch=1000),
        ]

    async def enqueue(self, dsn: str, variant: EnqueueVariant, n: int, caps: Caps) -> float:
        from pgqueuer import Queries

        async with open_driver(dsn, self.driver) as driver:
            queries = Queries(driver)
            if variant.batch == 1:
                started = time.perf_counter()
                for i in range(n):
                    await queries.enqueue("noop", b"%d" % i)
                return time.perf_counter() - started
            batches = [(["noop"] * len(r), [b"%d" % i for i in r], [0] * len(r)) for r in chunks(n, variant.batch)]
            started = time.perf_counter()
            for entrypoints, payloads, priorities in batches:
                await queries.enqueue(entrypoints, payloads, priorities)  # type: ignore[arg-type]
            return time.perf_counter() - started

    async def prefill(self, dsn: str, n: int, caps: Caps) -> None:
        from pgqueuer import Queries

        async with open_driver(dsn, self.driver) as driver:
            queries = Queries(driver)
            for r in chunks(n, 5000):
                await queries.enqueue(["noop"] * len(r), [b"%d" % i for i in r], [0] * len(r))

    def drain_configs(self, caps: Caps) -> list[DrainConfig]:
        tasks = "unbounded (tasks)"
        configs = [
            DrainConfig(
                "bs10x1",
                "batch_size 10",
                1,
                {"batch_size": 10},
                default=True,
                quick=True,
                concurrency=tasks,
                claim="10",
            ),
            DrainConfig(
                "bs100x1",
                "batch_size 100",
                1,
                {"batch_size": 100},
                quick=self.driver == "asyncpg",
                big=True,
                concurrency=tasks,
                claim="100",
            ),
        ]
        if self.driver == "asyncpg":
            configs += [
                DrainConfig("bs100x2", "batch_size 100", 2, {"batch_size": 100}, concurrency=tasks, claim="100"),
                DrainConfig("bs1000x1", "batch_size 1000", 1, {"batch_size": 1000}, concurrency=tasks, claim="1000"),
                DrainConfig("bs1000x2", "batch_size 1000", 2, {"batch_size": 1000}, concurrency=tasks, claim="1000"),
            ]
        return configs

    def latency_config(self, caps: Caps) -> DrainConfig:
        return DrainConfig("bs10", "batch_size 10 (default)", 1, {"batch_size": 10})

    unfinished_due_sql = "SELECT EXISTS (SELECT 1 FROM pgqueuer WHERE execute_after <= now())"

    async def prefill_far_future(self, dsn: str, n: int, caps: Caps) -> None:
        from pgqueuer import Queries

        async with open_driver(dsn, self.driver) as driver:
            queries = Queries(driver)
            for r in chunks(n, 5000):
                await queries.enqueue(
                    ["noop"] * len(r),
                    [b"%d" % i for i in r],
                    [0] * len(r),
                    execute_after=[timedelta(days=30)] * len(r),  # type: ignore[arg-type]
                )

    def delayed_configs(self, caps: Caps) -> list[DrainConfig]:
        return [DrainConfig("bs10", "batch_size 10 (default), execute_after", 1, {"batch_size": 10})]

    async def enqueue_at(self, dsn: str, jobs: list[tuple[int, datetime]], caps: Caps) -> None:
        from pgqueuer import Queries

        async with open_driver(dsn, self.driver) as driver:
            queries = Queries(driver)
            # execute_after is relative to the database's now() at the insert: the stored
            # due times (due_times_sql) are what the lag is measured from.
            now = datetime.now(UTC)
            delays = [max(timedelta(0), at - now) for _, at in jobs]
            await queries.enqueue(
                ["noop"] * len(jobs),
                [b"%d" % i for i, _ in jobs],
                [0] * len(jobs),
                execute_after=delays,  # type: ignore[arg-type]
            )

    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        asyncio.run(self._worker(dsn, config, ctx))

    async def _worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext) -> None:
        from pgqueuer import Job, Queries, QueueManager

        hit = ctx.hit
        async with open_driver(dsn, self.driver) as driver:
            qm = QueueManager(Queries(driver))

            @qm.entrypoint("noop")
            async def noop(job: Job) -> None:
                hit(int(job.payload or b"0"))

            ctx.ready_and_wait()
            task = asyncio.create_task(qm.run(batch_size=int(config.settings["batch_size"])))
            stop = asyncio.create_task(ctx.wait_stop())
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
            qm.shutdown.set()
            stop.cancel()
            await asyncio.wait_for(task, timeout=15)

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str, caps: Caps) -> AsyncIterator[Producer]:
        from pgqueuer import Queries

        async with open_driver(dsn, self.driver) as driver:
            yield _Producer(Queries(driver))


class _Producer:
    def __init__(self, queries: Any) -> None:
        self._queries = queries

    async def enqueue(self, i: int) -> None:
        await self._queries.enqueue("noop", b"%d" % i)


ASYNCPG = PgQueuerSystem("asyncpg")
PSYCOPG = PgQueuerSystem("psycopg")
