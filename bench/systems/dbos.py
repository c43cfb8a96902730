"""DBOS Transact (Python): queued workflows, enqueued with ``DBOSClient`` and run by a launched ``DBOS`` app.

A job is one workflow named ``noop`` on the queue ``bench``, enqueued from
outside the app with ``DBOSClient.enqueue`` (one by one) or
``DBOSClient.enqueue_in_transaction`` (a batch: DBOS has no multi-row enqueue,
so a batch is one transaction, still with a status row and an inputs row
inserted per workflow). It is finished when its row in ``dbos.workflow_status``
says ``SUCCESS``.

The system database is the one the harness gives the system: ``DBOS.launch()``
creates and migrates DBOS's schema there (``install``). The queue's
configuration lives in that database too; each worker process registers it
with its drain configuration (``DBOSClient.register_queue``), builds the app,
then launches it after the start gate, so DBOS's own start-up (its queue
threads, the first poll) is timed. Queues are polled, not notified: a worker
thread claims the queue's enqueued workflows every ``polling_interval_sec``
(1 s by default), all of them unless ``worker_concurrency`` bounds the claim.
Delayed workflows (``delay_seconds``) are moved from DELAYED to ENQUEUED by a
background sweep that runs once a second, then wait for the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from bench.systems.base import Caps, DrainConfig, EnqueueVariant, Producer, System, chunks

if TYPE_CHECKING:
    import sqlalchemy as sa
    from dbos import DBOSClient, EnqueueOptions

    from bench.harness.workers import WorkerContext

APP = "pgsched-bench"
QUEUE = "bench"
WORKFLOW = "noop"
#: One application version for every process, so each worker dequeues what the others (and clients) enqueued.
VERSION = "bench"
#: DBOS's default queue polling interval (seconds).
DEFAULT_POLLING_S = 1.0
#: The shortest polling interval the tuned rows use (seconds).
FAST_POLLING_S = 0.01
#: Workflows per transaction in the prefills.
PREFILL_BATCH = 1000


def _ignore(i: int) -> None:
    return None


#: Set by the worker process to its ``ctx.hit``.
hit: Callable[[int], None] = _ignore


def _register_workflow() -> None:
    """Register the no-op workflow with DBOS (in the worker process, before the app is built)."""
    from dbos import DBOS

    @DBOS.workflow(name=WORKFLOW)
    async def noop(i: int = 0) -> None:
        hit(i)


def _config(dsn: str, executor_id: str) -> Any:
    """The app's configuration: the harness's database as DBOS's system database, quiet logs."""
    from dbos import DBOSConfig

    config: DBOSConfig = {
        "name": APP,
        "system_database_url": dsn,
        "application_version": VERSION,
        "executor_id": executor_id,
        "log_level": "WARNING",
    }
    return config


@contextlib.contextmanager
def open_client(dsn: str) -> Iterator[DBOSClient]:
    """A DBOSClient acting for the benchmark app (DBOS builds its engine); destroyed on exit."""
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=dsn, application_name=APP)
    try:
        yield client
    finally:
        client.destroy()


@contextlib.contextmanager
def open_client_engine(dsn: str) -> Iterator[tuple[DBOSClient, sa.Engine]]:
    """A DBOSClient on an engine of ours, and that engine, for ``enqueue_in_transaction``.

    The transactions come from the client's own engine: DBOS reuses its compiled
    INSERTs only on a connection of the dialect it compiled them for.
    """
    import sqlalchemy as sa
    from dbos import DBOSClient

    engine = sa.create_engine(sa.make_url(dsn).set(drivername="postgresql+psycopg"), pool_size=2)
    try:
        client = DBOSClient(system_database_engine=engine, application_name=APP)
        try:
            yield client, engine
        finally:
            client.destroy()
    finally:
        engine.dispose()


def _options(workflow_id: str | None = None, delay_s: float | None = None) -> EnqueueOptions:
    options: EnqueueOptions = {"workflow_name": WORKFLOW, "queue_name": QUEUE}
    if workflow_id is not None:
        options["workflow_id"] = workflow_id
    if delay_s is not None:
        options["delay_seconds"] = delay_s
    return options


def _enqueue_batches(dsn: str, jobs: list[tuple[int, float | None]], batch: int) -> None:
    """Enqueue ``(i, delay seconds or None)`` jobs, ``batch`` workflows per transaction."""
    with open_client_engine(dsn) as (client, engine):
        for r in chunks(len(jobs), batch):
            with engine.begin() as conn:
                for k in r:
                    i, delay = jobs[k]
                    client.enqueue_in_transaction(conn, _options(delay_s=delay), i)


class DBOSSystem(System):
    """DBOS queues: at its defaults (unbounded claims, 1 s polling) and with a bounded claim and fast polling."""

    name = "dbos"
    title = "DBOS"
    role = "peer"
    database = "bench_dbos"
    modules = ("dbos",)
    distributions = ("dbos", "sqlalchemy", "psycopg")
    # Inputs, outputs and step results are kept in tables of their own, without a foreign key.
    truncate_tables = ("dbos.workflow_status", "dbos.workflow_input", "dbos.workflow_output", "dbos.operation_outputs")
    unfinished_sql = "SELECT EXISTS (SELECT 1 FROM dbos.workflow_status WHERE name = 'noop' AND status <> 'SUCCESS')"
    finished_sql = "SELECT count(*) FROM dbos.workflow_status WHERE name = 'noop' AND status = 'SUCCESS'"
    queued_sql = "SELECT count(*) FROM dbos.workflow_status WHERE name = 'noop' AND status = 'ENQUEUED'"
    # The delayed jobs carry their i in their workflow ID ("bench-<i>"); the due time is the client's clock.
    due_times_sql = (
        "SELECT split_part(workflow_uuid, '-', 2)::int, (delay_until_epoch_ms / 1000.0)::float8"
        " FROM dbos.workflow_status WHERE name = 'noop' AND delay_until_epoch_ms IS NOT NULL"
    )
    unfinished_due_sql = (
        "SELECT EXISTS (SELECT 1 FROM dbos.workflow_status WHERE name = 'noop' AND status IN ('ENQUEUED', 'PENDING'))"
    )

    async def install(self, dsn: str, caps: Caps) -> str:
        await asyncio.to_thread(self._install, dsn)
        return f"DBOS.launch() (creates its system schema) + DBOSClient.register_queue({QUEUE!r})"

    @staticmethod
    def _install(dsn: str) -> None:
        from dbos import DBOS

        _register_workflow()
        DBOS(config=_config(dsn, "bench-install"))
        DBOS.launch()
        DBOS.destroy()
        with open_client(dsn) as client:
            client.register_queue(QUEUE)

    def enqueue_variants(self, caps: Caps) -> list[EnqueueVariant]:
        return [
            EnqueueVariant("one", "DBOSClient.enqueue()", "one-by-one"),
            EnqueueVariant(
                "batch",
                "DBOSClient.enqueue_in_transaction(), {batch} per transaction (no multi-row enqueue)",
                "batch",
                batch=1000,
            ),
        ]

    async def enqueue(self, dsn: str, variant: EnqueueVariant, n: int, caps: Caps) -> float:
        return await asyncio.to_thread(self._enqueue, dsn, variant.batch, n)

    @staticmethod
    def _enqueue(dsn: str, batch: int, n: int) -> float:
        options = _options()
        if batch == 1:
            with open_client(dsn) as client:
                started = time.perf_counter()
                for i in range(n):
                    client.enqueue(options, i)
                return time.perf_counter() - started
        with open_client_engine(dsn) as (client, engine):
            with engine.connect() as conn:
                client.enqueue_in_transaction(conn, options, -1)  # connects and compiles before the clock
                conn.rollback()
            started = time.perf_counter()
            for r in chunks(n, batch):
                with engine.begin() as conn:
                    for i in r:
                        client.enqueue_in_transaction(conn, options, i)
            return time.perf_counter() - started

    async def prefill(self, dsn: str, n: int, caps: Caps) -> None:
        await asyncio.to_thread(_enqueue_batches, dsn, [(i, None) for i in range(n)], PREFILL_BATCH)

    async def prefill_far_future(self, dsn: str, n: int, caps: Caps) -> None:
        delay = timedelta(days=30).total_seconds()
        await asyncio.to_thread(_enqueue_batches, dsn, [(i, delay) for i in range(n)], PREFILL_BATCH)

    def drain_configs(self, caps: Caps) -> list[DrainConfig]:
        default = {"worker_concurrency": None, "polling_s": DEFAULT_POLLING_S}
        unbounded = "unbounded"
        every = "all enqueued"
        fast = f"polling every {FAST_POLLING_S * 1000:g} ms"
        return [
            DrainConfig(
                "defaultx1",
                "no worker_concurrency, polling every 1 s",
                1,
                default,
                default=True,
                quick=True,
                concurrency=unbounded,
                claim=every,
            ),
            DrainConfig(
                "defaultx2",
                "no worker_concurrency, polling every 1 s",
                2,
                default,
                default=True,
                concurrency=unbounded,
                claim=every,
            ),
            DrainConfig(
                "w100x1",
                f"worker_concurrency 100, {fast}",
                1,
                {"worker_concurrency": 100, "polling_s": FAST_POLLING_S},
                quick=True,
                big=True,
                concurrency="100",
                claim="≤ 100",
            ),
            DrainConfig(
                "w100x2",
                f"worker_concurrency 100, {fast}",
                2,
                {"worker_concurrency": 100, "polling_s": FAST_POLLING_S},
                quick=True,
                concurrency="100",
                claim="≤ 100",
            ),
            DrainConfig(
                "fastx1",
                f"no worker_concurrency, {fast}",
                1,
                {"worker_concurrency": None, "polling_s": FAST_POLLING_S},
                concurrency=unbounded,
                claim=every,
            ),
        ]

    def latency_config(self, caps: Caps) -> DrainConfig:
        return DrainConfig(
            "w100", f"worker_concurrency 100, polling every {FAST_POLLING_S * 1000:g} ms", 1, _fast_settings()
        )

    def delayed_configs(self, caps: Caps) -> list[DrainConfig]:
        sweep = "delay_seconds; DELAYED → ENQUEUED sweep every 1 s (fixed)"
        return [
            DrainConfig(
                "w100",
                f"worker_concurrency 100, polling every {FAST_POLLING_S * 1000:g} ms, {sweep}",
                1,
                _fast_settings(),
            ),
            DrainConfig(
                "default",
                f"polling every 1 s (default), {sweep}",
                1,
                {"worker_concurrency": None, "polling_s": DEFAULT_POLLING_S},
            ),
        ]

    async def enqueue_at(self, dsn: str, jobs: list[tuple[int, datetime]], caps: Caps) -> None:
        await asyncio.to_thread(self._enqueue_at, dsn, jobs)

    @staticmethod
    def _enqueue_at(dsn: str, jobs: list[tuple[int, datetime]]) -> None:
        # delay_seconds is relative to the client's clock when the status row is built: the
        # stored delay_until_epoch_ms (due_times_sql) is what the lag is measured from.
        with open_client_engine(dsn) as (client, engine), engine.begin() as conn:
            for i, at in jobs:
                delay = max(0.0, (at - datetime.now(UTC)).total_seconds())
                client.enqueue_in_transaction(conn, _options(f"bench-{i}", delay), i)

    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        global hit
        hit = ctx.hit
        from dbos import DBOS

        worker_concurrency = config.settings["worker_concurrency"]
        with open_client(dsn) as client:
            client.register_queue(
                QUEUE,
                worker_concurrency=None if worker_concurrency is None else int(worker_concurrency),
                polling_interval_sec=float(config.settings["polling_s"]),
            )
        _register_workflow()
        # worker_concurrency is per executor: every process has its own executor ID.
        DBOS(config=_config(dsn, f"bench-{os.getpid()}"))
        ctx.ready_and_wait()
        DBOS.launch()
        while not ctx.stop_requested():
            time.sleep(0.02)
        DBOS.destroy(workflow_completion_timeout_sec=5)

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str, caps: Caps) -> AsyncIterator[Producer]:
        with open_client(dsn) as client:
            await client.check_connection_async()
            yield _Producer(client)


def _fast_settings() -> dict[str, Any]:
    return {"worker_concurrency": 100, "polling_s": FAST_POLLING_S}


class _Producer:
    def __init__(self, client: DBOSClient) -> None:
        self._client = client
        self._options = _options()

    async def enqueue(self, i: int) -> None:
        await self._client.enqueue_async(self._options, i)


SYSTEM = DBOSSystem()
