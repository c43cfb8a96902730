"""raw-SQL: the leanest job loop psycopg and PostgreSQL allow — the yardstick for every ratio.

One table with a partial index on ready jobs. A claim is one statement
(``UPDATE … WHERE id IN (SELECT … ORDER BY … LIMIT n FOR UPDATE SKIP LOCKED)
RETURNING``), a completion one batched ``DELETE … WHERE id = ANY(…)``, each in
its own autocommit transaction, on one connection per process. Enqueue is one
``INSERT … RETURNING`` with a ``pg_notify`` in the same statement; the batch is
one multi-row insert from arrays (``unnest``). The latency worker LISTENs on the
connection it claims with.

Delayed jobs go to a table of their own with a ``run_at`` column. Its worker
LISTENs on its claiming connection, claims only jobs with ``run_at <= now()``,
and when nothing is due sleeps until the next ``run_at`` (read from the
database's clock) or a notification, whichever comes first: as prompt as a
delayed job can be without a scheduler process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bench.systems.base import Caps, DrainConfig, EnqueueVariant, Producer, System, chunks

if TYPE_CHECKING:
    import psycopg

    from bench.harness.workers import WorkerContext

CHANNEL = "bench_raw"

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS bench_raw;
CREATE TABLE IF NOT EXISTS bench_raw.jobs (
    id         bigserial   PRIMARY KEY,
    queue      text        NOT NULL DEFAULT 'default',
    task       text        NOT NULL,
    args       jsonb       NOT NULL DEFAULT '{}',
    state      text        NOT NULL DEFAULT 'available',
    priority   integer     NOT NULL DEFAULT 0,
    attempt    integer     NOT NULL DEFAULT 0,
    locked_at  timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS jobs_ready_idx ON bench_raw.jobs (queue, priority DESC, id)
    WHERE state = 'available';
CREATE TABLE IF NOT EXISTS bench_raw.delayed (
    id         bigserial   PRIMARY KEY,
    task       text        NOT NULL,
    args       jsonb       NOT NULL DEFAULT '{}',
    state      text        NOT NULL DEFAULT 'available',
    run_at     timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz
);
CREATE INDEX IF NOT EXISTS delayed_due_idx ON bench_raw.delayed (run_at, id) WHERE state = 'available';
"""

INSERT_ONE = """
WITH ins AS (INSERT INTO bench_raw.jobs (task, args) VALUES (%s, %s) RETURNING id)
SELECT ins.id, pg_notify('bench_raw', 'default') FROM ins
"""

INSERT_MANY = """
WITH ins AS (
    INSERT INTO bench_raw.jobs (task, args)
    SELECT * FROM unnest(%s::text[], %s::jsonb[])
    RETURNING id
)
SELECT array_agg(ins.id), pg_notify('bench_raw', 'default') FROM ins
"""

CLAIM = """
UPDATE bench_raw.jobs j
SET state = 'running', attempt = j.attempt + 1, locked_at = now()
WHERE j.id IN (
    SELECT id FROM bench_raw.jobs
    WHERE state = 'available' AND queue = 'default'
    ORDER BY priority DESC, id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
)
RETURNING j.id, j.task, j.args
"""

COMPLETE = "DELETE FROM bench_raw.jobs WHERE id = ANY(%s)"

DELAYED_INSERT = """
WITH ins AS (
    INSERT INTO bench_raw.delayed (task, args, run_at)
    SELECT * FROM unnest(%s::text[], %s::jsonb[], %s::timestamptz[])
    RETURNING id
)
SELECT count(*), pg_notify('bench_raw', 'default') FROM ins
"""

DELAYED_CLAIM = """
UPDATE bench_raw.delayed j
SET state = 'running', started_at = clock_timestamp()
WHERE j.id IN (
    SELECT id FROM bench_raw.delayed
    WHERE state = 'available' AND run_at <= now()
    ORDER BY run_at, id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
)
RETURNING j.id, j.args
"""

# Seconds until the next job is due, on the database's clock (NULL: none waiting).
DELAYED_NEXT = (
    "SELECT extract(epoch FROM min(run_at) - clock_timestamp())::float8 FROM bench_raw.delayed"
    " WHERE state = 'available'"
)

# Finished delayed jobs stay (state 'done') so their start lag can be read afterwards.
DELAYED_DONE = "UPDATE bench_raw.delayed SET state = 'done' WHERE id = ANY(%s)"


def _args(i: int) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb({"i": i})


class RawSystem(System):
    """Hand-written SQL over psycopg 3, no framework."""

    name = "raw"
    title = "raw-SQL"
    role = "baseline"
    database = "bench_raw"
    modules = ("psycopg",)
    distributions = ("psycopg", "psycopg-binary")
    truncate_tables = ("bench_raw.jobs", "bench_raw.delayed")
    unfinished_sql = "SELECT EXISTS (SELECT 1 FROM bench_raw.jobs)"
    # Completed jobs are deleted: finished = inserted (the sequence, restarted by
    # every reset) minus those still in the table.
    finished_sql = (
        "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM bench_raw.jobs_id_seq)"
        " - (SELECT count(*) FROM bench_raw.jobs)"
    )
    queued_sql = "SELECT count(*) FROM bench_raw.jobs"
    due_times_sql = "SELECT (args->>'i')::int, extract(epoch FROM run_at)::float8 FROM bench_raw.delayed"
    db_start_lag_sql = (
        "SELECT (args->>'i')::int, extract(epoch FROM started_at - run_at)::float8 FROM bench_raw.delayed"
        " WHERE started_at IS NOT NULL"
    )

    async def install(self, dsn: str, caps: Caps) -> str:
        import psycopg

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(SCHEMA)
        return "CREATE TABLE bench_raw.jobs, bench_raw.delayed + partial indexes"

    # -- enqueue -----------------------------------------------------------------------

    def enqueue_variants(self, caps: Caps) -> list[EnqueueVariant]:
        return [
            EnqueueVariant("one", "INSERT … RETURNING + pg_notify, one statement", "one-by-one"),
            EnqueueVariant("batch", "multi-row INSERT (unnest), batches of {batch}", "batch", batch=1000),
        ]

    async def enqueue(self, dsn: str, variant: EnqueueVariant, n: int, caps: Caps) -> float:
        import time

        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            if variant.batch == 1:
                started = time.perf_counter()
                for i in range(n):
                    conn.execute(INSERT_ONE, ("noop", _args(i)), prepare=True).fetchone()
                return time.perf_counter() - started
            batches = [(["noop"] * len(r), [_args(i) for i in r]) for r in chunks(n, variant.batch)]
            started = time.perf_counter()
            for tasks, args in batches:
                conn.execute(INSERT_MANY, (tasks, args), prepare=True).fetchone()
            return time.perf_counter() - started

    async def prefill(self, dsn: str, n: int, caps: Caps) -> None:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            for r in chunks(n, 5000):
                conn.execute(INSERT_MANY, (["noop"] * len(r), [_args(i) for i in r]))

    # -- workers -----------------------------------------------------------------------

    def drain_configs(self, caps: Caps) -> list[DrainConfig]:
        loop = "1 (loop)"
        return [
            DrainConfig("b1x8", "batch 1", 8, {"batch": 1}, concurrency=loop, claim="1"),
            DrainConfig("b10x8", "batch 10", 8, {"batch": 10}, concurrency=loop, claim="10"),
            DrainConfig("b100x8", "batch 100", 8, {"batch": 100}, quick=True, big=True, concurrency=loop, claim="100"),
            DrainConfig("b10x1", "batch 10", 1, {"batch": 10}, quick=True, concurrency=loop, claim="10"),
            DrainConfig("b100x1", "batch 100", 1, {"batch": 100}, quick=True, big=True, concurrency=loop, claim="100"),
            DrainConfig("b100x2", "batch 100", 2, {"batch": 100}, concurrency=loop, claim="100"),
        ]

    def latency_config(self, caps: Caps) -> DrainConfig:
        return DrainConfig("listen", "LISTEN on the claiming connection, claim ≤ 10", 1, {"batch": 10, "listen": True})

    def delayed_configs(self, caps: Caps) -> list[DrainConfig]:
        return [
            DrainConfig(
                "listen-sleep",
                "LISTEN; claim run_at <= now(); sleep until the next run_at",
                1,
                {"batch": 10, "delayed": True},
            )
        ]

    async def enqueue_at(self, dsn: str, jobs: list[tuple[int, datetime]], caps: Caps) -> None:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                DELAYED_INSERT, (["noop"] * len(jobs), [_args(i) for i, _ in jobs], [at for _, at in jobs])
            ).fetchone()

    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        import psycopg

        batch = int(config.settings["batch"])
        listen = bool(config.settings.get("listen"))
        if config.settings.get("delayed"):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                conn.execute(DELAYED_NEXT, prepare=True)
                ctx.ready_and_wait()
                self._delayed_loop(conn, batch, ctx)
            return
        with psycopg.connect(dsn, autocommit=True) as conn:
            if listen:
                conn.execute(f"LISTEN {CHANNEL}")
            # Prepare both statements before the clock starts.
            conn.execute(CLAIM, (0,), prepare=True)
            conn.execute(COMPLETE, ([],), prepare=True)
            ctx.ready_and_wait()
            if listen:
                self._listen_loop(conn, batch, ctx)
            else:
                self._drain_loop(conn, batch, ctx)

    @staticmethod
    def _drain_loop(conn: psycopg.Connection[Any], batch: int, ctx: WorkerContext) -> None:
        hit = ctx.hit
        while not ctx.stop_requested():
            rows = conn.execute(CLAIM, (batch,), prepare=True).fetchall()
            if not rows:
                return  # the queue was pre-filled: empty means done
            for _id, _task, args in rows:
                hit(args["i"])
            conn.execute(COMPLETE, ([r[0] for r in rows],), prepare=True)

    @staticmethod
    def _listen_loop(conn: psycopg.Connection[Any], batch: int, ctx: WorkerContext) -> None:
        hit = ctx.hit
        while not ctx.stop_requested():
            rows = conn.execute(CLAIM, (batch,), prepare=True).fetchall()
            if rows:
                for _id, _task, args in rows:
                    hit(args["i"])
                conn.execute(COMPLETE, ([r[0] for r in rows],), prepare=True)
                continue
            # Notifications that arrived during the claim wait in psycopg's
            # backlog, so none is lost between the empty claim and this wait.
            for _ in conn.notifies(timeout=0.1, stop_after=1):
                pass

    @staticmethod
    def _delayed_loop(conn: psycopg.Connection[Any], batch: int, ctx: WorkerContext) -> None:
        hit = ctx.hit
        while not ctx.stop_requested():
            rows = conn.execute(DELAYED_CLAIM, (batch,), prepare=True).fetchall()
            if rows:
                for _id, args in rows:
                    hit(args["i"])
                conn.execute(DELAYED_DONE, ([r[0] for r in rows],), prepare=True)
                continue
            row = conn.execute(DELAYED_NEXT, prepare=True).fetchone()
            wait = 0.1 if row is None or row[0] is None else min(0.1, row[0])
            if wait > 0:
                # Until the next job is due, or a new job is announced (it may be due sooner).
                for _ in conn.notifies(timeout=wait, stop_after=1):
                    pass

    @asynccontextmanager
    async def producer(self, dsn: str, caps: Caps) -> AsyncIterator[Producer]:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            yield _RawProducer(conn)


class _RawProducer:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    async def enqueue(self, i: int) -> None:
        self._conn.execute(INSERT_ONE, ("noop", _args(i)), prepare=True).fetchone()


SYSTEM = RawSystem()
