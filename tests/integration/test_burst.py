"""--burst: a worker stops only when nothing is due, nothing runs here, no completion of its own is in flight, and
nothing waits only for a limit or a rate window to reopen."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgsched import App
from tests.integration.conftest import Running, wait_all, wait_for

StartWorker = Callable[..., Running]


def configure(conn: psycopg.Connection[Any], queue: str, **settings: Any) -> None:
    named = ", ".join(f"{k} => %({k})s" for k in settings)
    conn.execute(f"SELECT pgsched.configure_queue(%(q)s, {named})", {"q": queue, **settings})


def exited(running: Running, timeout: float = 30.0) -> int | None:
    running.join(timeout)
    return running.exit_code


def test_a_burst_worker_waits_for_a_slot_another_worker_holds(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="capped.job", queue="capped")
    def work(i: int) -> int:
        return i

    configure(conn, "capped", concurrency=3)
    ids = [int(j) for j in app.enqueue_many([work.job(i) for i in range(30)])]
    # Another worker holds all 3 slots: this worker's first claims get nothing although 27 jobs are due.
    held = conn.execute(
        "SELECT id, lease_token FROM pgsched.claim('other', ARRAY['capped'], 3, interval '5 minutes')"
    ).fetchall()
    assert len(held) == 3
    caplog.set_level(logging.INFO, logger="pgsched")
    burst = start_worker(queues=["capped"], concurrency=4, burst=True, poll_interval=0.1)
    wait_for(lambda: "held back" in caplog.text, what="the wait for a slot, in the log")
    assert burst.thread.is_alive(), "--burst stopped while 27 due jobs waited for a slot"
    assert "no due work left" not in caplog.text
    conn.execute(
        "SELECT * FROM pgsched.complete(%s::bigint[], %s::bigint[])",
        [[r["id"] for r in held], [r["lease_token"] for r in held]],
    )
    assert exited(burst) == 0
    wait_all(conn, ids, "completed", timeout=5)
    assert "no due work left: stopping (--burst)" in caplog.text


def test_two_burst_workers_on_a_capped_queue_run_every_job(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="capped.job", queue="capped")
    def work(i: int) -> int:
        return i

    configure(conn, "capped", concurrency=3)
    ids = [int(j) for j in app.enqueue_many([work.job(i) for i in range(60)])]
    workers = [start_worker(queues=["capped"], concurrency=4, burst=True, poll_interval=0.1) for _ in range(2)]
    assert [exited(w) for w in workers] == [0, 0]
    wait_all(conn, ids, "completed", timeout=5)


def test_a_burst_worker_waits_for_the_rate_window_to_reopen(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    """Runs about 2 s: three rate windows of 1 s."""

    @app.task(name="rated.job", queue="rated")
    def work(i: int) -> int:
        return i

    configure(conn, "rated", rate=2, rate_period="1 second")
    ids = [int(j) for j in app.enqueue_many([work.job(i) for i in range(5)])]
    caplog.set_level(logging.INFO, logger="pgsched")
    burst = start_worker(queues=["rated"], burst=True, poll_interval=0.1)
    assert exited(burst) == 0
    wait_all(conn, ids, "completed", timeout=5)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("--burst:")]
    assert said, "the wait for the rate window is not in the log"
    assert all("rate" in line for line in said), said


def test_a_burst_worker_runs_the_dependents_its_own_completions_release(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="graph.step")
    def step(name: str) -> str:
        return name

    a = step.job("a")
    b = step.using(depends_on=[a]).job("b")
    c = step.job("c")
    d = step.using(depends_on=[b, c]).job("d")
    ids = [int(j) for j in app.enqueue_many([a, b, c, d])]
    # Completions wait a while in the completer before they are written: a burst worker that does not wait for
    # them sees nothing due and stops before they release b and d.
    burst = start_worker(burst=True, poll_interval=0.1, completion_flush_interval=0.5)
    assert exited(burst) == 0
    wait_all(conn, ids, "completed", timeout=5)
