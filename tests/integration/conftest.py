"""Helpers for in-process worker tests: run a Worker in a thread, and wait on the database, not the clock."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
import pytest

from pgsched import App
from pgsched.runtime.worker import Worker, WorkerOptions
from tests.conftest import drop_database, new_database

T = TypeVar("T")

TERMINAL = ("completed", "dead", "cancelled")


def wait_for(
    predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.01, what: str | Callable[[], str] = ""
) -> T:
    """Poll predicate until it returns something truthy; fail the test at the deadline (what: its description).

    The default deadline only bounds a wait for a condition, so it is generous (a loaded machine can take seconds
    to start a worker or run a job); a test that checks a promised latency passes its own timeout or measures it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout}s waiting for {described or predicate}")
        time.sleep(interval)


def job(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any] | None:
    """The job's row: from pgsched.jobs while active, else its latest job_history row."""
    row = conn.execute("SELECT * FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT * FROM pgsched.job_history WHERE id = %s ORDER BY finished_at DESC LIMIT 1", [job_id]
        ).fetchone()
    return row  # type: ignore[no-any-return]


def wait_state(conn: psycopg.Connection[Any], job_id: int, *states: str, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until the job is in one of states; returns its row."""

    def check() -> dict[str, Any] | None:
        row = job(conn, job_id)
        return row if row is not None and row["state"] in states else None

    return wait_for(check, timeout, what=lambda: f"job {job_id} in {states} (now {job(conn, job_id)})")


def wait_all(conn: psycopg.Connection[Any], ids: list[int], state: str, timeout: float = 30.0) -> None:
    def check() -> bool:
        row = conn.execute(
            "SELECT count(*) AS n FROM pgsched.job_history WHERE id = ANY(%s) AND state = %s", [ids, state]
        ).fetchone()
        return bool(row and row["n"] == len(ids))

    wait_for(check, timeout, what=f"{len(ids)} jobs {state}")


def events(conn: psycopg.Connection[Any], job_id: int, kind: str | None = None) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM pgsched.job_timeline WHERE job_id = %s AND (%s::text IS NULL OR kind = %s)",
        [job_id, kind, kind],
    ).fetchall()


class _DatabasePool:
    """Creates the next test's database while the current test runs (CREATE DATABASE takes ~0.5 s)."""

    AHEAD = 4  # banked during slow tests, spent by quick ones

    def __init__(self, admin_dsn: str, template: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = template
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-db")
        self._ahead: deque[Future[tuple[str, str]]] = deque()
        for _ in range(self.AHEAD):
            self._refill()

    def _refill(self) -> None:
        self._ahead.append(self._pool.submit(new_database, self.admin_dsn, self.template))

    def take(self) -> tuple[str, str]:
        future = self._ahead.popleft()
        self._refill()
        return future.result()

    def close(self) -> None:
        while self._ahead:
            name, _ = self._ahead.popleft().result()
            drop_database(self.admin_dsn, name)
        self._pool.shutdown()


@pytest.fixture(scope="session")
def database_pool(admin_dsn: str, template_db: str) -> Iterator[_DatabasePool]:
    pool = _DatabasePool(admin_dsn, template_db)
    yield pool
    pool.close()


@pytest.fixture
def dsn(admin_dsn: str, database_pool: _DatabasePool) -> Iterator[str]:
    """DSN of a fresh database with pgsched installed (as tests/conftest.py's, made ahead of time)."""
    name, url = database_pool.take()
    try:
        yield url
    finally:
        drop_database(admin_dsn, name)


class Running:
    """A Worker running in a background thread."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="test-worker", daemon=True)

    def _run(self) -> None:
        try:
            self.exit_code = self.worker.run()
        except BaseException as exc:
            self.error = exc
            raise

    def start(self) -> Running:
        self.thread.start()
        # Started = its heartbeater exists (connections open, tasks registered), and its listener when it
        # listens (made a moment after the heartbeater: a busy machine can show the gap).
        worker = self.worker
        wait_for(
            lambda: (
                (worker._heartbeater is not None and (not worker.options.listen or worker._listener is not None))
                or not self.thread.is_alive()
            ),
            what="worker start",
        )
        listener = self.worker._listener
        if listener is not None:
            wait_for(lambda: listener.connected.is_set() or listener.available is False, what="listener")
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self.worker.stop()
        self.join(timeout)

    def join(self, timeout: float = 15.0) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"
        assert self.error is None, f"worker crashed: {self.error!r}"


@pytest.fixture
def start_worker(app: App) -> Iterator[Callable[..., Running]]:
    """start_worker(**WorkerOptions) -> a started worker for the test's app, stopped at teardown."""
    started: list[Running] = []

    def start(target: App | None = None, **options: Any) -> Running:
        options.setdefault("install_signal_handlers", False)
        options.setdefault("poll_interval", 0.2)
        running = Running(Worker(target or app, WorkerOptions(**options)))
        started.append(running)
        return running.start()

    yield start
    for running in started:
        if running.thread.is_alive():
            running.stop()
