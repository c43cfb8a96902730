"""The hot path is batched: claims sized to free slots, one heartbeat for all jobs, completions in batches."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgsched import App
from tests.integration.conftest import Running, wait_all, wait_for

StartWorker = Callable[..., Running]


def claim_batches(conn: psycopg.Connection[Any], ids: list[int]) -> list[int]:
    """Sizes of the claim() calls that took these jobs, in order (one statement, one now())."""
    rows = conn.execute(
        "SELECT at, count(*) AS n FROM pgsched.job_timeline WHERE kind = 'claimed' AND job_id = ANY(%s) "
        "GROUP BY at ORDER BY at",
        [ids],
    ).fetchall()
    return [int(r["n"]) for r in rows]


@pytest.mark.parametrize(("prefetch", "capacity"), [(0, 10), (None, 20)])
def test_claims_come_in_batches_sized_to_free_slots(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, prefetch: int | None, capacity: int
) -> None:
    running_now = 0
    peak = 0
    lock = threading.Lock()

    @app.task(name="batch.work")
    def work(i: int) -> None:
        nonlocal running_now, peak
        with lock:
            running_now += 1
            peak = max(peak, running_now)
        time.sleep(0.05)
        with lock:
            running_now -= 1

    ids = app.enqueue_many([work.job(i) for i in range(60)])
    # A long poll interval: every claim after the first is one that finishing jobs asked for.
    start_worker(concurrency=10, prefetch=prefetch, poll_interval=5)
    wait_all(conn, ids, "completed", timeout=10)
    sizes = claim_batches(conn, ids)
    assert sum(sizes) == 60
    assert sizes[0] == capacity
    threshold = capacity // 2
    assert all(threshold <= s <= capacity for s in sizes[:-1]), sizes
    assert len(sizes) <= 60 // threshold + 1
    assert 5 <= peak <= 10  # never more handlers at once than the concurrency


def test_one_heartbeat_extends_every_running_job(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    release = threading.Event()

    @app.task(name="batch.hold")
    def hold(i: int) -> None:
        release.wait(60)

    ids = app.enqueue_many([hold.job(i) for i in range(10)])
    running = start_worker(concurrency=10, prefetch=0, lease=3)
    try:

        def extended() -> bool:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE lease_expires_at > started_at + interval '3.2 seconds') AS n "
                "FROM pgsched.jobs WHERE state = 'running'"
            ).fetchone()
            return bool(row and row["n"] == 10)

        wait_for(extended, timeout=15, what="a heartbeat that extended all ten leases")
        row = conn.execute(
            "SELECT count(DISTINCT lease_expires_at) AS expiries, count(DISTINCT leased_by) AS workers "
            "FROM pgsched.jobs WHERE state = 'running'"
        ).fetchone()
        assert row == {"expiries": 1, "workers": 1}  # one statement, one now(), for all of them
        worker_row = conn.execute(
            "SELECT running FROM pgsched.workers WHERE name = %s", [running.worker.name]
        ).fetchone()
        assert worker_row == {"running": 10}
    finally:
        release.set()
    wait_all(conn, ids, "completed")


def test_completions_are_written_in_batches(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    together = threading.Barrier(10, timeout=10)

    @app.task(name="batch.done")
    def done(i: int) -> int:
        together.wait()
        return i

    ids = app.enqueue_many([done.job(i) for i in range(10)])
    start_worker(concurrency=10, prefetch=0, completion_flush_interval=0.2)
    wait_all(conn, ids, "completed")
    row = conn.execute(
        "SELECT count(DISTINCT finished_at) AS statements, count(*) AS n, "
        "array_agg(result ORDER BY id) = array_agg(args->'i' ORDER BY id) AS results_match "
        "FROM pgsched.job_history WHERE id = ANY(%s)",
        [ids],
    ).fetchone()
    assert row is not None
    assert row["n"] == 10
    assert row["results_match"]
    assert row["statements"] <= 2, row


def test_free_slots_are_not_left_idle_behind_long_jobs(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    @app.task(name="batch.long")
    def long_job(i: int) -> None:
        started.release()
        release.wait(60)

    @app.task(name="batch.short")
    def short_job(i: int) -> int:
        return i

    longs = app.enqueue_many([long_job.job(i) for i in range(3)])
    start_worker(concurrency=4, prefetch=0, poll_interval=0.2)
    try:
        for _ in longs:
            assert started.acquire(timeout=5)
        # One slot of four is free: fewer than a batch, but a slot no job uses.
        shorts = app.enqueue_many([short_job.job(i) for i in range(3)])
        wait_all(conn, shorts, "completed", timeout=20)  # well before the long jobs would free their slots
        assert not release.is_set()
    finally:
        release.set()
    wait_all(conn, longs, "completed")
