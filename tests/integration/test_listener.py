"""Wake-ups: NOTIFY starts idle workers at once, survives dropped connections, and polling covers its absence."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgsched import App
from tests.integration.conftest import Running, wait_for, wait_state

# Also run on the second PostgreSQL version CI tests (a smoke of the worker tier).
pytestmark = pytest.mark.smoke

StartWorker = Callable[..., Running]

IDLE_POLL = 30.0  # so long that only a NOTIFY can explain a quick start


def backends(conn: psycopg.Connection[Any], application_name: str) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE %s",
        [application_name],
    ).fetchall()
    return [r["pid"] for r in rows]


def terminate(conn: psycopg.Connection[Any], pids: list[int]) -> None:
    assert pids
    for pid in pids:
        conn.execute("SELECT pg_terminate_backend(%s)", [pid])


def start_delay(conn: psycopg.Connection[Any], job_id: int, timeout: float = 30.0) -> timedelta:
    """Enqueue-to-claim time of a job, by the database's clock."""
    done = wait_state(conn, job_id, "completed", timeout=timeout)
    return done["started_at"] - done["created_at"]  # type: ignore[no-any-return]


def assert_woken_promptly(app: App, conn: psycopg.Connection[Any], rounds: int = 2) -> None:
    for i in range(rounds):
        time.sleep(0.25)  # let the worker settle into its 30 s wait
        job_id = app.enqueue("wake.job", {"i": i})
        delay = start_delay(conn, job_id, timeout=15)  # the assertion below is the bound; this only waits
        assert delay < timedelta(seconds=0.5), delay


def register(app: App) -> None:
    @app.task(name="wake.job")
    def woken(i: int) -> int:
        return i


def test_notify_wakes_an_idle_worker(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    register(app)
    running = start_worker(poll_interval=IDLE_POLL)
    assert running.worker._listener is not None
    assert running.worker._listener.available
    assert_woken_promptly(app, conn)


def test_listener_reconnects_after_its_backend_is_terminated(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    register(app)
    running = start_worker(poll_interval=IDLE_POLL)
    listener = running.worker._listener
    assert listener is not None
    old = backends(conn, "pgsched listener")
    assert len(old) == 1
    terminate(conn, old)

    def listening_again() -> bool:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'pgsched listener' AND query LIKE 'LISTEN%%' AND pid <> %s",
            [old[0]],
        ).fetchone()
        return row is not None

    wait_for(listening_again, timeout=15, what="a new LISTEN connection")
    assert listener.reconnects >= 1
    assert_woken_promptly(app, conn)


def test_worker_reconnects_after_its_connections_are_terminated(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    register(app)
    running = start_worker(poll_interval=IDLE_POLL, lease=3)
    name = running.worker.name
    first = app.enqueue("wake.job", {"i": 0})
    wait_state(conn, first, "completed")
    claimers = backends(conn, f"pgsched worker {name}")
    assert len(claimers) == 1
    terminate(conn, claimers)
    second = app.enqueue("wake.job", {"i": 1})  # NOTIFY: the claim meets the dead connection, then reconnects
    assert wait_state(conn, second, "completed", timeout=15)["result"] == 1  # well inside the 30 s poll
    assert backends(conn, f"pgsched worker {name}") not in ([], claimers)

    # Everything at once: claim, completer, heartbeat and listener connections.
    terminate(conn, backends(conn, "pgsched %"))
    ids = [app.enqueue("wake.job", {"i": i}) for i in range(2, 6)]
    for i, job_id in enumerate(ids, start=2):
        assert wait_state(conn, job_id, "completed", timeout=15)["result"] == i
    assert running.thread.is_alive()


def test_without_listen_jobs_are_polled_within_the_interval(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    register(app)
    running = start_worker(listen=False, poll_interval=0.3)
    assert running.worker._listener is None
    assert backends(conn, "pgsched listener") == []
    for i in range(3):
        time.sleep(0.2)
        job_id = app.enqueue("wake.job", {"i": i})
        assert start_delay(conn, job_id) < timedelta(seconds=0.3 + 0.5)
