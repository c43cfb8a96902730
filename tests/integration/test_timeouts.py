"""Timeouts for every kind of handler: the run fails ('timed out after N s'), its slot frees, it is retried,
and whatever the overrun run does later is refused (its token is spent).

Sync handlers on the thread pool (the thread is abandoned, the worker recycles once they pile up), on
the process pool (the child is killed and replaced), and coroutines. Also the deadline the database
enforces on a run that hangs while its heartbeats continue, and the watched event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsched import App
from pgsched.runtime.worker import RECYCLE_EXIT_CODE
from tests.integration import timeouts_app
from tests.integration.conftest import Running, job, wait_all, wait_for, wait_state

StartWorker = Callable[..., Running]
APP_REF = "tests.integration.timeouts_app:app"


@pytest.fixture
def shared_app(dsn: str) -> Iterator[App]:
    """The importable app of timeouts_app, pointed at this test's database."""
    timeouts_app.app.configure(dsn)
    yield timeouts_app.app
    timeouts_app.app.close()


def claimed_tokens(conn: psycopg.Connection[Any], job_id: int) -> list[int]:
    rows = conn.execute(
        "SELECT token FROM pgsched.job_events WHERE job_id = %s AND kind = 'claimed' ORDER BY seq", [job_id]
    ).fetchall()
    return [int(r["token"]) for r in rows]


def refused(conn: psycopg.Connection[Any], job_id: int, token: int) -> bool:
    """A late completion under an old token: True when the database refuses it."""
    row = conn.execute(
        "SELECT accepted FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [job_id, token]
    ).fetchone()
    assert row is not None
    return row["accepted"] is False


def test_thread_pool_fails_an_overrunning_sync_run_frees_its_slot_and_retries_it(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    returned = threading.Event()

    @app.task(name="slow", timeout=0.5, max_attempts=2, retry_backoff=0.1, retry_backoff_max=0.1)
    def slow() -> str:
        time.sleep(2.0)  # deaf to the worker: only the timeout ends this run
        returned.set()
        return "late"

    @app.task(name="quick")
    def quick() -> str:
        return "ok"

    slow_id = slow.enqueue()
    running = start_worker(concurrency=1, max_abandoned=10)
    first = wait_for(lambda: (job(conn, slow_id) or {}).get("last_error"), 10, what="the first timeout")
    assert first == "timed out after 0.5 s"
    quick_id = quick.enqueue()  # the only slot is free again, though the first thread still sleeps
    wait_state(conn, quick_id, "completed", timeout=10)
    dead = wait_state(conn, slow_id, "dead", timeout=15)  # the retry timed out too: attempts used up
    assert (dead["error"], dead["attempt"]) == ("timed out after 0.5 s", 2)
    assert returned.wait(10)
    wait_for(lambda: running.worker._executor.abandoned == 0, 10, what="abandoned threads to return")
    assert running.worker._executor.timeouts == 2
    assert [r["state"] for r in conn.execute("SELECT state FROM pgsched.job_history WHERE id = %s", [slow_id])] == [
        "dead"
    ]  # the late "late" was never written
    assert all(refused(conn, slow_id, token) for token in claimed_tokens(conn, slow_id))


def test_a_per_job_timeout_applies_to_a_task_without_one(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="nap")
    def nap(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    limited = app.enqueue("nap", {"seconds": 3}, timeout=timedelta(milliseconds=300), max_attempts=1)
    free = nap.enqueue(0.5)
    start_worker(concurrency=2)
    assert wait_state(conn, limited, "dead", timeout=10)["error"] == "timed out after 0.3 s"
    assert wait_state(conn, free, "completed", timeout=10)["result"] == 0.5
    with pytest.raises(ValueError, match="positive"):
        app.enqueue("nap", {"seconds": 1}, timeout=0)


def test_the_thread_pool_recycles_the_worker_once_abandoned_threads_pile_up(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    stop = threading.Event()

    @app.task(name="stuck", timeout=0.3, max_attempts=1)
    def stuck() -> None:
        stop.wait(30)

    ids = [stuck.enqueue() for _ in range(2)]
    running = start_worker(concurrency=4, max_abandoned=2, shutdown_timeout=1)
    try:
        wait_all(conn, ids, "dead", timeout=15)
        running.join(20)  # stops by itself: recycled
        assert running.exit_code == 75
    finally:
        stop.set()


def test_process_pool_kills_an_overrunning_child_and_replaces_it(
    shared_app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, tmp_path: Path
) -> None:
    mark = tmp_path / "hang.pids"
    before = timeouts_app.pid.enqueue()
    running = start_worker(shared_app, concurrency=1, pool="process", app_ref=APP_REF)
    first_pid = wait_state(conn, before, "completed", timeout=60)["result"]
    assert first_pid != os.getpid()  # ran in a child
    hung = timeouts_app.hang.using(max_attempts=2).enqueue(600, str(mark))
    wait_for(lambda: (job(conn, hung) or {}).get("last_error"), 30, what="the first timeout")
    assert job(conn, hung)["last_error"] == "timed out after 1 s"  # type: ignore[index]
    dead = wait_state(conn, hung, "dead", timeout=60)
    assert dead["error"] == "timed out after 1 s"
    killed = [int(line) for line in mark.read_text().split()]
    assert killed[0] == first_pid  # the same child ran both, until the overrun
    assert len(killed) == 2
    assert killed[1] != first_pid
    for pid in killed:  # killed, not left running
        wait_for(lambda pid=pid: not _alive(pid), 10, what=f"process {pid} gone")
    after = timeouts_app.pid.enqueue()
    new_pid = wait_state(conn, after, "completed", timeout=60)["result"]
    assert new_pid not in killed
    assert new_pid != os.getpid()
    assert all(refused(conn, hung, token) for token in claimed_tokens(conn, hung))
    running.stop(30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead too
            return stat.read().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone since the kill(0), or between the open and the read
        return False


def test_an_async_handler_past_its_timeout_is_cancelled_and_retried(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="asleep", timeout=0.3, max_attempts=2, retry_backoff=0.1, retry_backoff_max=0.1)
    async def asleep() -> str:
        await asyncio.sleep(30)
        return "late"

    @app.task(name="aquick")
    async def aquick() -> str:
        return "ok"

    job_id = asleep.enqueue()
    start_worker(concurrency=1)
    dead = wait_state(conn, job_id, "dead", timeout=15)
    assert (dead["error"], dead["attempt"]) == ("timed out after 0.3 s", 2)
    quick_id = aquick.enqueue()
    wait_state(conn, quick_id, "completed", timeout=10)
    assert all(refused(conn, job_id, token) for token in claimed_tokens(conn, job_id))


def test_the_database_fails_a_run_that_hangs_while_its_heartbeats_continue(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, dsn: str
) -> None:
    """A hung worker process (here: plain SQL that claims, starts and then only heartbeats) loses the job to
    housekeeping at deadline + grace; its late completion is refused."""
    conn.execute("UPDATE pgsched.config SET timeout_grace = '0.5 seconds'")
    job_id = app.enqueue("hung.task", {}, timeout=1, max_attempts=1)
    with psycopg.connect(dsn, autocommit=True) as hung:
        row = hung.execute(
            "SELECT id, lease_token FROM pgsched.claim('hung-worker', '{default}', 1, '30 seconds')"
        ).fetchone()
        assert row is not None
        assert row[0] == job_id
        token = row[1]
        hung.execute("SELECT pgsched.start(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [job_id, token])
        start_worker(queues=["elsewhere"], lease=4)  # housekeeping only: it serves another queue
        held = True
        deadline = time.monotonic() + 30
        while held and time.monotonic() < deadline:  # the hung worker's heartbeats go on
            beat = hung.execute(
                "SELECT held FROM pgsched.heartbeat(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], '30 seconds')",
                [job_id, token],
            ).fetchone()
            assert beat is not None
            held = beat[0]
            time.sleep(0.1)
        assert not held, "the database never took the job back"
        dead = wait_state(conn, job_id, "dead")
        assert dead["error"] == "timed out after 1 s"
        late = hung.execute(
            "SELECT accepted FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [job_id, token]
        ).fetchone()
        assert late == (False,)


def test_a_worker_whose_event_loop_is_blocked_gets_its_async_capacity_back(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21.4: the blocked loop is abandoned and a fresh one runs the other jobs; the job blocking it fails
    (an attempt counted, so it cannot block worker after worker for free); the jobs stuck behind it are handed
    back (no attempt spent) and run."""
    release = threading.Event()

    @app.task(name="block", priority=10, timeout=2, max_attempts=2, retry_backoff=0.1, retry_backoff_max=0.1)
    async def block() -> str:
        release.wait(120)  # a blocking call in a coroutine: the loop stops
        return "late"

    @app.task(name="nap")
    async def nap(i: int) -> int:
        await asyncio.sleep(0.05)
        return i

    block_id = block.enqueue()
    behind = [nap.enqueue(i) for i in range(5)]
    caplog.set_level(logging.WARNING)
    try:
        running = start_worker(concurrency=6, prefetch=0, lease=5, loop_block_timeout=1, max_abandoned=5)
        dead = wait_state(conn, block_id, "dead", timeout=60)
        assert dead["attempt"] == 2
        assert dead["error"].startswith("blocked the event loop for "), dead["error"]
        wait_all(conn, behind, "completed", timeout=60)
        quick = [nap.enqueue(i) for i in range(20)]
        wait_all(conn, quick, "completed", timeout=60)
        rows = conn.execute("SELECT max_attempts, attempt FROM pgsched.job_history WHERE id = ANY(%s)", [behind])
        assert all(r["max_attempts"] - r["attempt"] >= 4 for r in rows.fetchall())  # handing back spent nothing
        executor = running.worker._executor
        assert executor.loops_abandoned == 2
        assert running.thread.is_alive()  # 2 of --max-abandoned-threads 5: no recycle yet
        families = {m.name: m for m in running.worker.metrics.collect()}
        assert families["pgsched_worker_loops_abandoned"].samples[0].value == 2
        assert any("blocked for" in r.message and f"job {block_id} (block)" in r.message for r in caplog.records)
        assert any("abandoned the event loop" in r.message for r in caplog.records)
    finally:
        release.set()
    wait_for(lambda: running.worker._executor.abandoned == 0, 30, what="the abandoned loops' threads to end")


def test_a_sync_wrapper_whose_coroutine_blocks_the_loop_fails_and_frees_its_thread(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    release = threading.Event()

    async def blocking() -> None:
        release.wait(120)  # blocks the loop it runs on

    @app.task(name="wrapped", max_attempts=1)
    def wrapped() -> Any:
        return blocking()  # a sync handler returning a coroutine: awaited on the worker's loop

    @app.task(name="after")
    async def after() -> str:
        return "ran"

    job_id = wrapped.enqueue()
    try:
        running = start_worker(concurrency=1, loop_block_timeout=1, max_abandoned=5)
        dead = wait_state(conn, job_id, "dead", timeout=30)
        assert dead["error"].startswith("blocked the event loop for "), dead["error"]
        assert wait_state(conn, after.enqueue(), "completed", timeout=30)["result"] == "ran"  # its only slot is back
        assert running.worker._executor.loops_abandoned == 1
    finally:
        release.set()
    wait_for(lambda: running.worker._executor.abandoned == 0, 30, what="the abandoned loop's thread to end")


def test_a_worker_recycles_after_max_abandoned_blocked_loops(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    release = threading.Event()

    @app.task(name="spin", max_attempts=5)
    async def spin() -> None:
        deadline = time.monotonic() + 120
        while not release.is_set() and time.monotonic() < deadline:
            sum(range(1000))  # CPU-bound, never awaits

    job_id = spin.enqueue()
    try:
        running = start_worker(concurrency=2, loop_block_timeout=1, max_abandoned=1, shutdown_timeout=1)
        wait_for(lambda: not running.thread.is_alive(), 60, what="the worker to recycle itself")
        assert running.exit_code == RECYCLE_EXIT_CODE
        row = job(conn, job_id)
        assert row is not None
        assert row["attempt"] == 1
        assert row["state"] in ("scheduled", "available"), row  # failed once, to be retried: not held
        assert row["last_error"].startswith("blocked the event loop for ")
    finally:
        release.set()
    wait_for(lambda: running.worker._executor.abandoned == 0, 30, what="the abandoned loop's thread to end")


def test_a_job_handed_back_at_every_shutdown_goes_dead_after_max_handbacks(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    """A poison job that hangs every worker is handed back at three deploys, and dead at the fourth."""
    release = threading.Event()

    @app.task(name="poison", max_attempts=5)
    def poison() -> None:
        release.wait(60)  # deaf to the stop request

    job_id = poison.enqueue()
    try:
        for n in range(1, 5):
            running = start_worker(concurrency=1, shutdown_timeout=0.2, name=f"deploy-{n}")
            wait_for(
                lambda n=n: (
                    (job(conn, job_id) or {}).get("leased_by") == f"deploy-{n}"
                    and (job(conn, job_id) or {}).get("started_at") is not None
                ),
                20,
                what=f"deploy {n} to run the job",
            )
            running.stop(30)
            row = job(conn, job_id)
            assert row is not None
            if n < 4:
                assert (row["state"], row["handbacks"], row["max_attempts"]) == ("available", n, 5 + n)
        assert row["state"] == "dead"
        assert row["error"] == "handed back unfinished at shutdown 4 times (max_handbacks 3)"
    finally:
        release.set()
