"""Fixtures for the fault-injection scenarios: a private cluster, a fresh database each, processes and proxies."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsched.db import schema
from tests.chaos.checker import Report, check, emit
from tests.chaos.cluster import Cluster, wait_ready
from tests.chaos.probe import SCHEMA
from tests.chaos.procs import REPO, Proc
from tests.chaos.proxy import Proxy

TEMPLATE = "chaos_template"
QUEUE = "chaos"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long scenarios run only when asked for by marker (`-m chaos`, as `make chaos` does); a plain
    `pytest tests/chaos` runs the quick variants."""
    if "chaos" in (config.option.markexpr or ""):
        return
    keep = [item for item in items if item.get_closest_marker("chaos") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        c.start()
        wait_ready(c.dsn())
        with psycopg.connect(c.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        schema.migrate(c.dsn(TEMPLATE))
        with psycopg.connect(c.dsn(TEMPLATE), autocommit=True) as conn:
            conn.execute(SCHEMA)
        yield c
    except Exception:
        print(c.log_tail())
        raise
    finally:
        c.destroy()


_counter = iter(range(1, 1_000_000))


class Env:
    """One scenario's world: its database, its processes, its proxies, its checker."""

    def __init__(self, cluster: Cluster, dbname: str, log_dir: Path) -> None:
        self.cluster = cluster
        self.dbname = dbname
        self.dsn = cluster.dsn(dbname)
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        self.proxies: list[Proxy] = []
        self.closers: list[Callable[[], None]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PGSCHED_") and k != "DATABASE_URL"}
        self.env.update(
            PYTHONPATH=str(REPO),
            CHAOS_PROBE_DSN=self.dsn,
            PYTHONUNBUFFERED="1",
        )

    def tcp_dsn(self, port: int | None = None, appname: str | None = None) -> str:
        dsn = self.cluster.tcp_dsn(self.dbname, port)
        return dsn + (f" application_name={appname}" if appname else "")

    def proxy(self) -> Proxy:
        p = Proxy(self.cluster.port)
        self.proxies.append(p)
        return p

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True)

    def worker(
        self,
        name: str,
        *,
        dsn: str | None = None,
        concurrency: int = 4,
        lease: float = 3.0,
        poll: float = 0.5,
        extra: tuple[str, ...] = (),
        start: bool = True,
    ) -> Proc:
        args = [
            "--dsn",
            dsn or self.dsn,
            "worker",
            "--app",
            "tests.chaos.probe:app",
            "--queues",
            QUEUE,
            "--concurrency",
            str(concurrency),
            "--lease",
            str(lease),
            "--poll-interval",
            str(poll),
            "--name",
            name,
            *extra,
        ]
        proc = Proc(name, args, self.log_dir, self.env)
        self.procs.append(proc)
        return proc.start() if start else proc

    def scanner(
        self, name: str, *, dsn: str | None = None, lease: float = 3.0, extra: tuple[str, ...] = (), start: bool = True
    ) -> Proc:
        args = ["--dsn", dsn or self.dsn, "scanner", "--lease", str(lease), "--name", name, *extra]
        proc = Proc(name, args, self.log_dir, self.env)
        self.procs.append(proc)
        return proc.start() if start else proc

    def wait_workers(self, *names: str, timeout: float = 30.0) -> None:
        wait_until(
            lambda: (
                self.scalar("SELECT count(*) FROM pgsched.workers WHERE name = ANY(%s)", [list(names)]) == len(names)
            ),
            timeout,
            f"workers {names} registered",
            self,
        )

    def scalar(self, query: str, params: Any = None) -> Any:
        for attempt in range(100):
            try:
                with self.connect() as conn:
                    row = conn.execute(query, params).fetchone()
                    return row[0] if row else None
            except psycopg.OperationalError:
                if attempt == 99:
                    raise
                time.sleep(0.2)
        return None

    def enqueue(
        self, n: int, prefix: str, *, max_attempts: int = 10, batch: int = 1000, priority: int = 0, **args: Any
    ) -> list[int]:
        """Enqueue n probe jobs (idempotency keys prefix-0 ...); returns the acknowledged ids."""
        ids: list[int] = []
        payload = json.dumps(args)
        with self.connect() as conn:
            for start in range(0, n, batch):
                count = min(batch, n - start)
                rows = conn.execute(
                    "SELECT job_id FROM pgsched.enqueue_many(array_fill('chaos.probe'::text, ARRAY[%s::int]),"
                    " array_fill(%s::jsonb, ARRAY[%s::int]), array_fill('chaos'::text, ARRAY[%s::int]), NULL,"
                    " array_fill(%s::integer, ARRAY[%s::int]),"
                    " ARRAY(SELECT %s::text || '-' || g FROM generate_series(%s::int, %s::int) g),"
                    " array_fill(%s::integer, ARRAY[%s::int]))",
                    [
                        count,
                        payload,
                        count,
                        count,
                        priority,
                        count,
                        prefix,
                        start,
                        start + count - 1,
                        max_attempts,
                        count,
                    ],
                ).fetchall()
                ids += [r[0] for r in rows]
        return ids

    def finished(self, ids: list[int]) -> int:
        return int(self.scalar("SELECT count(DISTINCT id) FROM pgsched.job_history WHERE id = ANY(%s)", [ids]))

    def wait_finished(self, ids: list[int], timeout: float, what: str = "") -> float:
        """Wait until every job in ids is in job_history; returns the seconds it took."""
        started = time.monotonic()
        wait_until(lambda: self.finished(ids) == len(set(ids)), timeout, what or f"{len(ids)} jobs finished", self)
        return time.monotonic() - started

    def check(
        self,
        scenario: str,
        acked: list[int],
        *,
        recovery_s: float | None = None,
        notes: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Report:
        """Run the checker and print its table (pytest -s shows it)."""
        report = check(self.dsn, scenario, acked, **kwargs)
        report.recovery_s = recovery_s
        report.notes.update(notes or {})
        emit(report)
        return report

    def dump_logs(self) -> None:
        for proc in self.procs:
            print(f"\n----- {proc.name} (pid {proc.popen.pid if proc.popen else '-'}) log tail -----")
            print(proc.tail(40))
        print("\n----- postgres log tail -----")
        print(self.cluster.log_tail(20))

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.heal()
        for proc in self.procs:  # all at once, then wait for each
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGTERM)
        for proc in self.procs:
            proc.stop(timeout=15)
        for closer in self.closers:
            with contextlib.suppress(Exception):
                closer()
        for proxy in self.proxies:
            proxy.close()


class Producer:
    """Enqueues probe jobs at a steady rate in a thread, through faults: an enqueue whose answer was lost is
    repeated under the same idempotency key, so it can neither be lost nor doubled. ``acked`` holds the ids
    the database acknowledged."""

    def __init__(self, dsn: str, prefix: str, rate: float, *, batch: int = 1, **args: Any) -> None:
        self.dsn = dsn
        self.prefix = prefix
        self.rate = rate
        self.batch = batch
        self.args = json.dumps(args)
        self.acked: list[int] = []
        self.retries = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"producer-{prefix}", daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(120)
        return self.acked

    def _loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            keys = [f"{self.prefix}-{n + i}" for i in range(self.batch)]
            while True:
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=3)
                    rows = conn.execute(
                        "SELECT job_id FROM pgsched.enqueue_many(array_fill('chaos.probe'::text, ARRAY[%s::int]),"
                        " array_fill(%s::jsonb, ARRAY[%s::int]), array_fill('chaos'::text, ARRAY[%s::int]),"
                        " NULL, NULL, %s::text[], array_fill(10, ARRAY[%s::int]))",
                        [len(keys), self.args, len(keys), len(keys), keys, len(keys)],
                    ).fetchall()
                    self.acked += [r[0] for r in rows]
                    break
                except psycopg.OperationalError:
                    self.retries += 1
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.2)
            n += self.batch
            next_at += self.batch / self.rate
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        if conn is not None:
            conn.close()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, env: Env | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            if env is not None:
                env.dump_logs()
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def env(cluster: Cluster, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    if not cluster.running():
        cluster.start()
    wait_ready(cluster.dsn())
    name = f"chaos_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    e = Env(cluster, name, tmp_path)
    try:
        yield e
    finally:
        e.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            e.dump_logs()
        if not cluster.running():
            cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
