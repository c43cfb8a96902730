"""Dispatch limits with real workers: a global concurrency limit across workers, a rate limit that workers sleep out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from pgsched import App
from tests.integration.conftest import Running, wait_all

StartWorker = Callable[..., Running]


def test_two_workers_together_never_run_more_than_the_queues_limit(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    conn.execute("SELECT pgsched.configure_queue('default', concurrency => 3)")
    lock = threading.Lock()
    now_running = [0]
    peak = [0]

    @app.task(name="limited.job")
    def limited() -> None:
        with lock:
            now_running[0] += 1
            peak[0] = max(peak[0], now_running[0])
        time.sleep(0.2)  # long enough that three handlers overlap even when a loaded machine starts them late
        with lock:
            now_running[0] -= 1

    ids = [int(limited.enqueue()) for _ in range(30)]
    start_worker(name="a", concurrency=4)
    start_worker(name="b", concurrency=4)
    wait_all(conn, ids, "completed", timeout=60)
    assert peak[0] == 3  # reached, never passed (8 handler slots between them)


def test_a_rate_limited_worker_sleeps_until_the_next_start(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    conn.execute("SELECT pgsched.configure_queue('default', rate => 4, rate_period => '1 second')")
    starts: list[float] = []

    @app.task(name="rated.job")
    def rated() -> None:
        starts.append(time.monotonic())

    ids = [int(rated.enqueue()) for _ in range(12)]
    running = start_worker(name="r", concurrency=8, poll_interval=5.0)
    wait_all(conn, ids, "completed", timeout=60)
    # 12 starts at 4 per second: three windows, so at least two seconds, and
    # not the 5 s poll interval per window: the worker slept until each opened.
    span = max(starts) - min(starts)
    assert 1.5 <= span < 6.0, span  # (handlers start a little after their claims)
    claims = running.worker.metrics.claim_seconds.collect()[0]
    count = next(s.value for s in claims.samples if s.name.endswith("_count"))
    assert count <= 12, count  # a claim per window opening, a few short ones; no spinning


def test_jobs_of_one_concurrency_key_run_one_at_a_time_across_workers(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    conn.execute("SELECT pgsched.configure_queue('default', key_concurrency => 1)")
    lock = threading.Lock()
    running: dict[str, int] = {}
    peak: dict[str, int] = {}

    @app.task(name="keyed.job")
    def keyed(customer: str) -> None:
        with lock:
            running[customer] = running.get(customer, 0) + 1
            peak[customer] = max(peak.get(customer, 0), running[customer])
        time.sleep(0.03)
        with lock:
            running[customer] -= 1

    ids = [int(keyed.using(concurrency_key=f"customer:{c}").enqueue(c)) for c in ("a", "b") for _ in range(8)]
    ids.append(int(app.enqueue("keyed.job", {"customer": "c"}, concurrency_key="customer:c")))
    row = conn.execute("SELECT concurrency_key FROM pgsched.jobs WHERE id = %s", [ids[-1]]).fetchone()
    assert row == {"concurrency_key": "customer:c"}
    start_worker(name="a", concurrency=4)
    start_worker(name="b", concurrency=4)
    wait_all(conn, ids, "completed", timeout=60)
    assert peak == {"a": 1, "b": 1, "c": 1}
