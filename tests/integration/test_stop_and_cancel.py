"""Stopping is not cancelling: a run cut short by shutdown is handed back, an acknowledged cancel ends cancelled.

And cancels arrive promptly: by NOTIFY within a second (no heartbeat in
between), by a short poll without LISTEN, and a claimed job whose cancel was
requested before its handler started never starts.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgsched import App, JobContext
from tests.integration.conftest import Running, events, job, wait_for, wait_state
from tests.integration.test_shutdown import CliWorker, cli_worker, handed_back, running_jobs  # noqa: F401

StartWorker = Callable[..., Running]

LONG_LEASE = 60.0  # heartbeats every 20 s: a cancel seen within a second did not come from one


def readme_handler(app: App, name: str, check: str, started: threading.Event) -> Any:
    """A long job as the README teaches, checking ``check`` (cancel_requested or should_stop) between steps."""

    @app.task(name=name, max_attempts=3)
    def long(ctx: JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if getattr(ctx, check):
                return "stopped early"
            ctx.sleep(0.05)
        return "ran to the end"

    return long


# -- stopping ------------------------------------------------------------------


@pytest.mark.parametrize("check", ["should_stop", "cancel_requested"])
def test_a_job_returning_after_the_stop_signal_is_handed_back_not_completed(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, check: str
) -> None:
    started = threading.Event()
    long = readme_handler(app, f"stop.{check}", check, started)
    job_id = long.enqueue()
    running = start_worker(shutdown_timeout=0.3)
    assert started.wait(10)
    running.stop()
    handed_back(conn, job_id, 3)  # available again, attempt not spent, never completed
    assert running_jobs(conn) == 0

    started.clear()
    again = start_worker(shutdown_timeout=0.3)
    assert started.wait(10)  # it runs again
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["attempt"]) == ("running", 2)
    again.stop()
    assert job(conn, job_id)["state"] == "available"  # type: ignore[index]


def test_an_async_job_that_swallows_the_stop_is_handed_back(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    started = threading.Event()

    @app.task(name="stop.async", max_attempts=3)
    async def swallow() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "returned instead of raising"
        return "ran to the end"

    job_id = swallow.enqueue()
    running = start_worker(shutdown_timeout=0.3)
    assert started.wait(10)
    running.stop()
    handed_back(conn, job_id, 3)


def test_stopping_and_cancel_requested_are_separate_signals(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    seen: list[tuple[bool, bool, bool]] = []
    started = threading.Event()

    @app.task(name="stop.flags", max_attempts=3)
    def flags(ctx: JobContext) -> None:
        started.set()
        ctx.sleep(60)
        seen.append((ctx.stopping, ctx.cancel_requested, ctx.should_stop))
        ctx.raise_if_cancelled()  # raises WorkerStopping: handed back

    job_id = flags.enqueue()
    running = start_worker(shutdown_timeout=0.2)
    assert started.wait(10)
    running.stop()
    assert seen == [(True, False, True)]
    handed_back(conn, job_id, 3)


def _long_job_under_sigterm(app: App, conn: psycopg.Connection[Any], worker: CliWorker) -> int:
    job_id = app.enqueue("cli.long", {"seconds": 600}, max_attempts=1)
    wait_state(conn, job_id, "running", timeout=30)
    wait_for(lambda: (job(conn, job_id) or {}).get("started_at") is not None, 10, what="the handler started")
    worker.signal(signal.SIGTERM, then_log="no new claims")
    assert worker.wait(timeout=20) == 0, worker.output
    handed_back(conn, job_id, 1)
    assert "handed back 1 jobs" in worker.output, worker.output
    return job_id


@pytest.mark.parametrize("command", ["worker", "run"])
def test_sigterm_hands_a_long_readme_job_back_and_it_runs_again(
    app: App,
    conn: psycopg.Connection[Any],
    cli_worker: Callable[..., CliWorker],  # noqa: F811 (the fixture of test_shutdown)
    command: str,
) -> None:
    job_id = _long_job_under_sigterm(app, conn, cli_worker("--shutdown-timeout", "0.5", command=command))
    assert conn.execute("SELECT count(*) AS n FROM pgsched.job_history WHERE id = %s", [job_id]).fetchone() == {"n": 0}
    second = cli_worker("--shutdown-timeout", "0.5", command=command)
    wait_for(lambda: (job(conn, job_id) or {}).get("attempt") == 2, 30, what=lambda: f"a second run: {second.output}")
    wait_state(conn, job_id, "running")
    second.signal(signal.SIGTERM, then_log="no new claims")
    assert second.wait(timeout=20) == 0, second.output
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["attempt"], row["max_attempts"]) == ("available", 2, 3)
    assert [e["kind"] for e in events(conn, job_id)] == ["claimed", "released", "claimed", "released"]


# -- cancelling ----------------------------------------------------------------


@pytest.mark.parametrize("check", ["cancel_requested", "should_stop"])
def test_a_handler_returning_after_a_cancel_ends_cancelled(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, check: str
) -> None:
    started = threading.Event()
    long = readme_handler(app, f"cancel.{check}", check, started)
    job_id = long.enqueue()
    start_worker(lease=LONG_LEASE)
    assert started.wait(10)
    assert app.cancel(job_id) == "cancel_requested"
    row = wait_state(conn, job_id, "cancelled", "completed", timeout=10)
    assert row["state"] == "cancelled"
    assert [e["kind"] for e in events(conn, job_id)] == ["claimed", "cancel_requested", "cancelled"]


def test_an_async_handler_returning_after_a_cancel_ends_cancelled(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    started = threading.Event()

    @app.task(name="cancel.async.swallow")
    async def swallow() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "returned instead of raising"
        return "ran to the end"

    job_id = swallow.enqueue()
    start_worker(lease=LONG_LEASE)
    assert started.wait(10)
    assert app.cancel(job_id) == "cancel_requested"
    assert wait_state(conn, job_id, "cancelled", "completed", timeout=10)["state"] == "cancelled"


@pytest.mark.parametrize("listen", [True, False])
def test_a_running_handler_sees_a_cancel_within_a_second(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, listen: bool
) -> None:
    started = threading.Event()
    seen_at: list[float] = []

    @app.task(name=f"cancel.prompt.{listen}")
    def prompt(ctx: JobContext) -> None:
        started.set()
        deadline = time.monotonic() + 60
        while not ctx.cancel_requested and time.monotonic() < deadline:
            ctx.sleep(1.0)  # woken by the cancel, not by this timeout
        seen_at.append(time.monotonic())

    job_id = prompt.enqueue()
    running = start_worker(lease=LONG_LEASE, listen=listen)
    heartbeater = running.worker._heartbeater
    assert heartbeater is not None
    assert started.wait(10)
    if listen:
        wait_for(lambda: heartbeater.beats >= 1, 5, what="the beat kicked when the listener connected")
    beats = heartbeater.beats
    assert app.cancel(job_id) == "cancel_requested"
    asked = time.monotonic()  # from when cancel() returned, as the promise (and the message below) says
    wait_for(lambda: seen_at, 5, what="the handler seeing the cancel")
    took = seen_at[0] - asked
    assert heartbeater.beats == beats, "a heartbeat carried it, not the prompt path"
    if listen:
        assert heartbeater.cancel_polls == 0, "with LISTEN, no polling"
    else:
        assert heartbeater.cancel_polls > 0
    print(f"listen={listen}: the handler saw the cancel {took * 1000:.0f} ms after cancel() returned")
    assert took < 1.0, f"cancel seen after {took:.3f}s"
    assert wait_state(conn, job_id, "cancelled", "completed")["state"] == "cancelled"


def test_cancels_racing_claims_never_start_a_cancelled_job(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, dsn: str
) -> None:
    """Many cancels land while a worker claims far ahead of its slots: none of the jobs cancelled before their
    handler started runs, and every handler that saw its cancel ends cancelled."""
    ran: set[int] = set()
    saw_cancel: set[int] = set()
    lock = threading.Lock()

    @app.task(name="race.job")
    def work(ctx: JobContext) -> None:
        with lock:
            ran.add(ctx.id)
        if ctx.sleep(0.01):
            with lock:
                saw_cancel.add(ctx.id)

    n = 600
    ids = app.enqueue_many([work.job() for _ in range(n)])
    doomed = random.Random(7).sample(ids, n // 2)
    said: dict[int, str] = {}

    def cancel_all() -> None:
        with psycopg.connect(dsn, autocommit=True) as other:
            for job_id in doomed:
                row = other.execute("SELECT pgsched.cancel(%s)", [job_id]).fetchone()
                assert row is not None
                said[job_id] = row[0]

    start_worker(concurrency=4, prefetch=200, lease=LONG_LEASE)
    canceller = threading.Thread(target=cancel_all)
    canceller.start()
    canceller.join(60)
    assert not canceller.is_alive()

    def finished() -> bool:
        row = conn.execute("SELECT count(*) AS n FROM pgsched.job_history WHERE id = ANY(%s)", [ids]).fetchone()
        return bool(row and row["n"] == n)

    wait_for(finished, 60, what="every job finished")
    history = {
        r["id"]: r
        for r in conn.execute(
            "SELECT id, state::text AS state, started_at FROM pgsched.job_history WHERE id = ANY(%s)", [ids]
        )
    }
    never_started = [i for i in doomed if history[i]["started_at"] is None]
    # claimed, then cancelled before a slot took it: the interesting race
    claimed_first = [i for i in never_started if said[i] == "cancel_requested"]
    assert not ran & set(never_started), "a job cancelled before its start ran"
    assert all(history[i]["state"] == "cancelled" for i in never_started)
    assert all(history[i]["started_at"] is not None for i in ran), "a handler ran without a recorded start"
    assert all(history[i]["state"] == "cancelled" for i in saw_cancel), "an acknowledged cancel ended completed"
    assert all(history[i]["state"] == "completed" for i in ids if i not in said)
    assert claimed_first, "the test never raced a cancel with a claim"
    print(
        f"cancelled {len(doomed)}: {sum(s == 'cancelled' for s in said.values())} while waiting, "
        f"{len(claimed_first)} claimed but not started (none ran), "
        f"{len(set(doomed) & ran)} after their handler started "
        f"({sum(history[i]['state'] == 'cancelled' for i in set(doomed) & ran)} of them ended cancelled)"
    )
