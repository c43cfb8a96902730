"""raw-SQL: the leanest job loop psycopg and PostgreSQL allow — the yardstick for every ratio.

One table with a partial index on ready jobs. A claim is one statement
(``UPDATE … WHERE id IN (SELECT … ORDER BY … LIMIT n FOR UPDATE SKIP LOCKED)
RETURNING``), a completion one batched ``DELETE … WHERE id = ANY(…)``, each in
its own autocommit transaction, on one connection per process. Enqueue is one
``INSERT … RETURNING`` with a ``pg_notify`` in the same statement; the batch is
one multi-row insert from arrays (``unnest``). The latency worker LISTENs on the
connection it claims with.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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
    truncate_tables = ("bench_raw.jobs",)
    unfinished_sql = "SELECT EXISTS (SELECT 1 FROM bench_raw.jobs)"
    # Completed jobs are deleted: finished = inserted (the sequence, restarted by
    # every reset) minus those still in the table.
    finished_sql = (
        "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM bench_raw.jobs_id_seq)"
        " - (SELECT count(*) FROM bench_raw.jobs)"
    )
    queued_sql = "SELECT count(*) FROM bench_raw.jobs"

    async def install(self, dsn: str, caps: Caps) -> str:
        import psycopg

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(SCHEMA)
        return "CREATE TABLE bench_raw.jobs + partial index"

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
        return [
            DrainConfig("b1x8", "batch 1", 8, {"batch": 1}),
            DrainConfig("b10x8", "batch 10", 8, {"batch": 10}),
            DrainConfig("b100x8", "batch 100", 8, {"batch": 100}, quick=True, big=True),
            DrainConfig("b10x1", "batch 10", 1, {"batch": 10}, quick=True),
            DrainConfig("b100x1", "batch 100", 1, {"batch": 100}, quick=True, big=True),
            DrainConfig("b100x2", "batch 100", 2, {"batch": 100}),
        ]

    def latency_config(self, caps: Caps) -> DrainConfig:
        return DrainConfig("listen", "LISTEN on the claiming connection, claim ≤ 10", 1, {"batch": 10, "listen": True})

    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        import psycopg

        batch = int(config.settings["batch"])
        listen = bool(config.settings.get("listen"))
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
