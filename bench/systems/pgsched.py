"""pgsched, through its public API: the CLI, the App and its tasks, and the SQL functions.

Schema: ``pgsched --dsn DSN migrate`` (or, before the CLI exists, the canonical
``sql/install.sql`` executed file by file). Enqueue: ``noop.enqueue(i, conn=…)``
and ``app.enqueue_many([noop.job(i) …], conn=…)``, plus two plain-SQL rows
(``SELECT pgsched.enqueue(…)`` and ``INSERT INTO pgsched.jobs (task, args)``),
each its own autocommit transaction. Workers: the ``pgsched worker`` command,
invoked in-process after the start gate (so interpreter start-up and imports
stay out of the timing), with ``--burst`` when draining; the latency worker is
stopped with SIGTERM, as an operator would. Delayed jobs: ``noop.using(run_at=…)``
through ``app.enqueue_many``; the scanner, where a configuration has one, is the
``pgsched scanner`` command in a process of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.systems.base import Caps, DrainConfig, EnqueueVariant, Producer, System, chunks, distribution_versions

if TYPE_CHECKING:
    from bench.harness.workers import WorkerContext

REPO_DIR = Path(__file__).resolve().parents[2]
APP_REF = "bench.apps.pgsched_app:app"

SQL_ENQUEUE = "SELECT pgsched.enqueue(%s, %s)"
SQL_INSERT = "INSERT INTO pgsched.jobs (task, args) VALUES (%s, %s)"
SQL_ENQUEUE_MANY = "SELECT job_id FROM pgsched.enqueue_many(%s::text[], %s::jsonb[])"


def _args(i: int) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb({"i": i})


def _install_sql_files(dsn: str) -> None:
    """Execute sql/install.sql the way psql would, following its ``\\ir`` lines."""
    import psycopg

    root = REPO_DIR / "sql"
    parts = []
    for line in (root / "install.sql").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\\ir\s+(\S+)", line.strip())
        if match:
            parts.append((root / match.group(1)).read_text(encoding="utf-8"))
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        for part in parts:
            conn.execute(part.encode())


class PgschedSystem(System):
    """The system under test."""

    name = "pgsched"
    title = "pgsched"
    role = "subject"
    database = "bench_pgsched"
    distributions = ("pgsched", "psycopg", "psycopg-pool")
    truncate_tables = (
        "pgsched.jobs",
        "pgsched.job_history",
        "pgsched.job_events",
        "pgsched.idempotency_keys",
        "pgsched.workers",
    )
    unfinished_sql = "SELECT EXISTS (SELECT 1 FROM pgsched.jobs)"
    finished_sql = "SELECT count(*) FROM pgsched.job_history WHERE state = 'completed'"
    queued_sql = "SELECT count(*) FROM pgsched.jobs WHERE state = 'available'"
    due_times_sql = (
        "SELECT (args->>'i')::int, extract(epoch FROM run_at)::float8 FROM pgsched.jobs"
        " UNION ALL SELECT (args->>'i')::int, extract(epoch FROM run_at)::float8 FROM pgsched.job_history"
    )
    # started_at is the claim's clock_timestamp(): both ends on the database's clock.
    db_start_lag_sql = (
        "SELECT (args->>'i')::int, extract(epoch FROM started_at - run_at)::float8 FROM pgsched.job_history"
        " WHERE state = 'completed'"
    )

    def probe(self) -> Caps:
        caps: Caps = {"sql": (REPO_DIR / "sql" / "install.sql").exists()}
        caps["versions"] = distribution_versions(self.distributions)
        if "pgsched" not in caps["versions"]:
            caps["python_error"] = "pgsched is not installed in bench/.venv (no pyproject.toml yet?)"
            return caps
        try:
            import pgsched
            from pgsched.cli import main as cli_main  # noqa: F401 - the worker command's group
            from pgsched.runtime.worker import Worker  # noqa: F401

            caps["python"] = True
            caps["cli"] = True
            caps["app_api"] = hasattr(pgsched.App, "enqueue_many") and hasattr(pgsched.Task, "job")
        except Exception as exc:
            caps["python_error"] = f"import pgsched failed: {exc!r}"
        return caps

    def skip_reason(self, scenario: str, caps: Caps) -> str | None:
        if scenario == "enqueue":
            return None if caps.get("sql") else "pending: no sql/install.sql"
        if not caps.get("cli"):
            return "pending: pgsched's worker is not available yet — " + str(caps.get("python_error", ""))
        return None

    # -- schema ------------------------------------------------------------------------

    async def install(self, dsn: str, caps: Caps) -> str:
        if caps.get("cli"):
            command = [str(Path(sys.executable).parent / "pgsched"), "--dsn", dsn, "migrate"]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"pgsched migrate failed: {done.stderr.strip() or done.stdout.strip()}")
            return "pgsched --dsn DSN migrate: " + done.stdout.strip()
        _install_sql_files(dsn)
        return "sql/install.sql (the CLI is not available yet)"

    # -- enqueue -----------------------------------------------------------------------

    def enqueue_variants(self, caps: Caps) -> list[EnqueueVariant]:
        variants = []
        if caps.get("app_api"):
            variants += [
                EnqueueVariant("one", "noop.enqueue(i, conn=…)", "one-by-one"),
                EnqueueVariant("batch", "app.enqueue_many([noop.job(i) …]), batches of {batch}", "batch", 1000),
            ]
        else:
            variants += [
                EnqueueVariant("one", "SELECT pgsched.enqueue() (Python API pending)", "one-by-one"),
                EnqueueVariant("batch", "SELECT pgsched.enqueue_many(), batches of {batch}", "batch", 1000),
            ]
        variants += [
            EnqueueVariant("sql-enqueue", "SQL: SELECT pgsched.enqueue(…) per job", "one-by-one"),
            EnqueueVariant("sql-insert", "SQL: INSERT INTO pgsched.jobs (task, args) per job", "one-by-one"),
        ]
        return variants

    async def enqueue(self, dsn: str, variant: EnqueueVariant, n: int, caps: Caps) -> float:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            if variant.id in ("one", "batch") and caps.get("app_api"):
                os.environ["PGSCHED_DSN"] = dsn
                from bench.apps import pgsched_app

                if variant.id == "one":
                    task = pgsched_app.noop
                    started = time.perf_counter()
                    for i in range(n):
                        task.enqueue(i, conn=conn)
                    return time.perf_counter() - started
                app, task = pgsched_app.app, pgsched_app.noop
                batches = [[task.job(i) for i in r] for r in chunks(n, variant.batch)]
                started = time.perf_counter()
                for specs in batches:
                    app.enqueue_many(specs, conn=conn)
                return time.perf_counter() - started
            if variant.batch > 1:
                arrays = [(["noop"] * len(r), [_args(i) for i in r]) for r in chunks(n, variant.batch)]
                started = time.perf_counter()
                for tasks, args in arrays:
                    conn.execute(SQL_ENQUEUE_MANY, (tasks, args), prepare=True).fetchall()
                return time.perf_counter() - started
            query = SQL_INSERT if variant.id == "sql-insert" else SQL_ENQUEUE
            started = time.perf_counter()
            for i in range(n):
                conn.execute(query, ("noop", _args(i)), prepare=True)
            return time.perf_counter() - started

    async def prefill(self, dsn: str, n: int, caps: Caps) -> None:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            for r in chunks(n, 5000):
                conn.execute(SQL_ENQUEUE_MANY, (["noop"] * len(r), [_args(i) for i in r])).fetchall()

    # -- workers -----------------------------------------------------------------------

    def drain_configs(self, caps: Caps) -> list[DrainConfig]:
        c100 = {"args": ["--concurrency", "100"]}
        c1000 = {"args": ["--concurrency", "1000"]}
        return [
            DrainConfig(
                "defaults",
                "concurrency 10",
                1,
                {"args": []},
                default=True,
                quick=True,
                big=True,
                concurrency="10",
                claim="≤ 20",
            ),
            DrainConfig("c100x1", "concurrency 100", 1, c100, quick=True, big=True, concurrency="100", claim="≤ 200"),
            DrainConfig("c100x2", "concurrency 100", 2, c100, concurrency="100", claim="≤ 200"),
            DrainConfig("c1000x1", "concurrency 1000", 1, c1000, concurrency="1000", claim="≤ 1000"),
            DrainConfig("c1000x2", "concurrency 1000", 2, c1000, concurrency="1000", claim="≤ 1000"),
            DrainConfig(
                "strict1x2",
                "concurrency 1, prefetch 0 (one-job claims)",
                2,
                {"args": ["--concurrency", "1", "--prefetch", "0"]},
                concurrency="1",
                claim="1",
            ),
            DrainConfig(
                "sync10x1",
                "concurrency 10, sync handler",
                1,
                {"args": [], "handler": "sync"},
                concurrency="10 (threads)",
                claim="≤ 20",
            ),
        ]

    def latency_config(self, caps: Caps) -> DrainConfig:
        return DrainConfig("defaults", "pgsched worker (defaults)", 1, {"args": [], "listen": True})

    def delayed_configs(self, caps: Caps) -> list[DrainConfig]:
        return [
            DrainConfig(
                "scanner",
                "worker (defaults) + pgsched scanner",
                1,
                {"args": [], "listen": True, "scanner": True},
                default=True,
            ),
            DrainConfig(
                "scanner-only",
                "worker --no-housekeeping + pgsched scanner",
                1,
                {"args": ["--no-housekeeping"], "listen": True, "scanner": True},
            ),
            DrainConfig(
                "no-scanner", "worker (defaults: poll interval 1 s), no scanner", 1, {"args": [], "listen": True}
            ),
            DrainConfig(
                "no-scanner-poll0.1",
                "worker --poll-interval 0.1, no scanner",
                1,
                {"args": ["--poll-interval", "0.1"], "listen": True},
            ),
        ]

    async def enqueue_at(self, dsn: str, jobs: list[tuple[int, datetime]], caps: Caps) -> None:
        import psycopg

        os.environ["PGSCHED_DSN"] = dsn
        from bench.apps import pgsched_app

        with psycopg.connect(dsn, autocommit=True) as conn:
            pgsched_app.app.enqueue_many([pgsched_app.noop.using(run_at=at).job(i) for i, at in jobs], conn=conn)

    @contextlib.contextmanager
    def side_processes(self, dsn: str, config: DrainConfig, log_dir: Path) -> Iterator[None]:
        if not config.settings.get("scanner"):
            yield
            return
        with scanner_process(dsn, log_dir / "scanner.log"):
            yield

    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        os.environ["PGSCHED_DSN"] = dsn
        if config.settings.get("handler") == "sync":
            os.environ["PGSCHED_BENCH_HANDLER"] = "sync"
        from bench.apps import pgsched_app
        from pgsched.cli import main as cli

        pgsched_app.hit = ctx.hit
        listen = bool(config.settings.get("listen"))
        argv = ["--dsn", dsn, "--log-level", "warning", "worker", "--app", APP_REF, "--queues", "default"]
        argv += list(config.settings.get("args", []))
        if not listen:
            argv.append("--burst")

        def stop_when_asked() -> None:
            while not ctx.stop_requested():
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGTERM)

        ctx.ready_and_wait()
        threading.Thread(target=stop_when_asked, daemon=True).start()
        try:
            cli.main(args=argv, prog_name="pgsched", standalone_mode=True)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise

    @contextlib.asynccontextmanager
    async def producer(self, dsn: str, caps: Caps) -> AsyncIterator[Producer]:
        import psycopg

        os.environ["PGSCHED_DSN"] = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            if caps.get("app_api"):
                from bench.apps import pgsched_app

                yield _ApiProducer(pgsched_app.noop, conn)
            else:
                yield _SqlProducer(conn)


SCANNER_NAME = "bench-scanner"


@contextlib.contextmanager
def scanner_process(dsn: str, log_path: Path, *, ready_timeout: float = 30.0) -> Iterator[subprocess.Popen[bytes]]:
    """``pgsched scanner`` in a process of its own, from the moment it holds every shard until the block ends.

    Shard leases left by an earlier measurement's scanner are cleared first, so
    this one takes all shards at once instead of waiting for them to expire.
    """
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgsched.shard_leases SET owner = NULL, expires_at = NULL")
        conn.execute("DELETE FROM pgsched.scanners")
        shards = int(conn.execute("SELECT shards FROM pgsched.config").fetchone()[0])  # type: ignore[index]
        command = [str(Path(sys.executable).parent / "pgsched"), "--dsn", dsn, "--log-level", "warning"]
        command += ["scanner", "--name", SCANNER_NAME]
        with log_path.open("ab") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + ready_timeout
            while True:
                held = conn.execute(
                    "SELECT count(*) FROM pgsched.shard_leases WHERE owner = %s AND expires_at > now()",
                    (SCANNER_NAME,),
                ).fetchone()
                if held and held[0] == shards:
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"pgsched scanner exited with {proc.returncode} (log: {log_path})")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgsched scanner did not take all {shards} shards in {ready_timeout:.0f} s")
                time.sleep(0.05)
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


class _ApiProducer:
    def __init__(self, task: Any, conn: Any) -> None:
        self._task = task
        self._conn = conn

    async def enqueue(self, i: int) -> None:
        self._task.enqueue(i, conn=self._conn)


class _SqlProducer:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def enqueue(self, i: int) -> None:
        self._conn.execute(SQL_ENQUEUE, ("noop", _args(i)), prepare=True)


SYSTEM = PgschedSystem()
