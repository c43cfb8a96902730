"""The worker runs handlers and writes what they asked for: results, retries, snoozes, dead letters."""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgsched import App, GiveUp, JobContext, Retry, Snooze, current_job
from tests.integration.conftest import Running, events, wait_all, wait_for, wait_state

# Also run on the second PostgreSQL version CI tests (a smoke of the worker tier).
pytestmark = pytest.mark.smoke

StartWorker = Callable[..., Running]


def test_sync_and_async_handlers_run_and_store_results(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    threads: dict[str, str] = {}

    @app.task(name="sync.add")
    def add(a: int, b: int) -> dict[str, int]:
        threads["sync"] = threading.current_thread().name
        return {"sum": a + b}

    @app.task(name="async.mul")
    async def mul(a: int, b: int) -> list[int]:
        asyncio.get_running_loop()  # on an event loop
        threads["async"] = threading.current_thread().name
        await asyncio.sleep(0.01)
        return [a * b]

    @app.task(name="no.result")
    def nothing() -> None: ...

    @app.task(name="odd.result")
    def odd() -> object:
        return object()  # not JSON: the job completes, with no result

    ids = [add.enqueue(2, 3), mul.enqueue(4, 5), nothing.enqueue(), odd.enqueue()]
    start_worker()
    wait_all(conn, ids, "completed")
    results = [wait_state(conn, i, "completed")["result"] for i in ids]
    assert results == [{"sum": 5}, [20], None, None]
    assert threads["sync"] != threads["async"]


def test_async_handlers_run_concurrently(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    @app.task(name="async.nap")
    async def nap(i: int) -> int:
        await asyncio.sleep(0.5)
        return i

    ids = app.enqueue_many([nap.job(i) for i in range(20)])
    start_worker(concurrency=20)
    wait_all(conn, ids, "completed", timeout=30)
    row = conn.execute(
        "SELECT extract(epoch FROM max(finished_at) - min(started_at)) AS span "
        "FROM pgsched.job_history WHERE id = ANY(%s)",
        [ids],
    ).fetchone()
    assert row is not None
    # (the claim, start and completion statements around them take time too, more so on a loaded machine)
    assert float(row["span"]) < 5.0, "20 x 0.5 s sleeps must overlap (in series they take 10 s)"


def test_async_handlers_share_the_concurrency_slots(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    running = 0
    peak = 0
    lock = threading.Lock()

    def enter() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)

    def leave() -> None:
        nonlocal running
        with lock:
            running -= 1

    @app.task(name="slot.async")
    async def a_job(i: int) -> None:
        enter()
        await asyncio.sleep(0.2)  # long enough to overlap even when a loaded machine starts them late
        leave()

    @app.task(name="slot.sync")
    def s_job(i: int) -> None:
        enter()
        time.sleep(0.2)
        leave()

    ids = app.enqueue_many([a_job.job(i) for i in range(8)] + [s_job.job(i) for i in range(4)])
    start_worker(concurrency=3)
    wait_all(conn, ids, "completed", timeout=10)
    assert peak <= 3
    assert peak >= 2


def test_handler_context_carries_the_run(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    seen: dict[str, dict[str, Any]] = {}

    def record(kind: str, ctx: JobContext) -> None:
        assert current_job() is ctx
        seen[kind] = {
            "id": ctx.id,
            "attempt": ctx.attempt,
            "token": ctx.lease_token,
            "key": ctx.idempotency_key,
            "scheduled_at": ctx.scheduled_at,
            "task": ctx.task,
            "queue": ctx.queue,
            "args": ctx.args,
            "cancel": ctx.cancel_requested,
            "lost": ctx.lease_lost,
        }

    @app.task(name="ctx.sync")
    def sync_ctx(n: int, ctx: JobContext, default: str = "d") -> str:
        record("sync", ctx)
        return default

    @app.task(name="ctx.async")
    async def async_ctx(ctx: JobContext, n: int) -> None:
        record("async", ctx)

    sync_id = sync_ctx.using(idempotency_key="order-1").enqueue(1)
    async_id = async_ctx.enqueue(n=2)
    start_worker()
    assert wait_state(conn, sync_id, "completed")["result"] == "d"
    wait_state(conn, async_id, "completed")
    for kind, job_id, key in (("sync", sync_id, "order-1"), ("async", async_id, None)):
        claimed = events(conn, job_id, "claimed")
        history = wait_state(conn, job_id, "completed")
        got = seen[kind]
        assert got["id"] == job_id
        assert got["attempt"] == 1 == history["attempt"]
        assert got["token"] == claimed[0]["token"] == history["lease_token"]
        assert got["key"] == key
        assert got["scheduled_at"] == history["run_at"]
        assert got["task"] == history["task"]
        assert got["queue"] == "default"
        assert "ctx" not in got["args"]
        assert (got["cancel"], got["lost"]) == (False, False)


def test_exceptions_retry_with_backoff_then_dead(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="always.fails", max_attempts=3, retry_backoff=0.3, retry_backoff_max=0.3)
    def fails(n: int) -> None:
        raise ValueError(f"boom on attempt {current_job().attempt}")

    job_id = fails.enqueue(1)
    start_worker(poll_interval=0.05)
    dead = wait_state(conn, job_id, "dead", timeout=10)
    assert dead["attempt"] == 3
    assert dead["error"].strip().splitlines()[-1] == "ValueError: boom on attempt 3"
    assert "Traceback" in dead["error"]
    failed = events(conn, job_id, "failed")
    claimed = events(conn, job_id, "claimed")
    assert [e["attempt"] for e in failed] == [1, 2]
    assert [e["attempt"] for e in claimed] == [1, 2, 3]
    for fail, next_claim in zip(failed, claimed[1:], strict=True):
        # jitter (0.25 by default) takes off at most a quarter of the 0.3 s backoff
        assert next_claim["at"] - fail["at"] >= timedelta(seconds=0.2)
        assert "ValueError: boom on attempt" in fail["detail"]["error"]


def test_retry_delays_and_counts_an_attempt(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    @app.task(name="retry.once", max_attempts=3)
    def flaky(ctx: JobContext) -> int:
        if ctx.attempt == 1:
            raise Retry(0.4, reason="not yet")
        return ctx.attempt

    job_id = flaky.enqueue()
    start_worker(poll_interval=0.05)
    done = wait_state(conn, job_id, "completed", timeout=5)
    assert (done["result"], done["attempt"], done["max_attempts"]) == (2, 2, 3)
    failed, claimed = events(conn, job_id, "failed"), events(conn, job_id, "claimed")
    assert failed[0]["detail"]["error"] == "not yet"
    assert claimed[1]["at"] - failed[0]["at"] >= timedelta(seconds=0.35)


def test_retry_at_the_last_attempt_is_dead(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    @app.task(name="retry.forever", max_attempts=2)
    def again() -> None:
        raise Retry(0.01)

    job_id = again.enqueue()
    start_worker(poll_interval=0.05)
    assert wait_state(conn, job_id, "dead")["attempt"] == 2


def test_snooze_does_not_consume_attempts(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="snoozer", max_attempts=1)
    def snoozer(ctx: JobContext) -> int:
        if ctx.attempt < 3:
            raise Snooze(timedelta(milliseconds=200))
        return ctx.attempt

    caplog.set_level(logging.INFO, logger="pgsched")
    job_id = snoozer.enqueue()
    running = start_worker(poll_interval=0.05)
    done = wait_state(conn, job_id, "completed")
    assert done["result"] == 3
    wait_for(lambda: running.worker.counts["completed"] == 1, what="the completion counted")
    assert running.worker.counts["failed"] == 0  # a snooze is no failure
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    snoozed, claimed = events(conn, job_id, "snoozed"), events(conn, job_id, "claimed")
    assert len(snoozed) == 2
    assert not events(conn, job_id, "failed")
    assert claimed[1]["at"] - snoozed[0]["at"] >= timedelta(seconds=0.15)


def test_give_up_is_dead_at_once(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    @app.task(name="give.up", max_attempts=5)
    def quitter() -> None:
        raise GiveUp("the account is gone")

    job_id = quitter.enqueue()
    start_worker()
    dead = wait_state(conn, job_id, "dead")
    assert dead["attempt"] == 1
    assert "the account is gone" in dead["error"]


def test_async_exceptions_and_controls(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    @app.task(name="async.fail", max_attempts=1)
    async def a_fail() -> None:
        raise KeyError("missing")

    @app.task(name="async.snooze", max_attempts=1)
    async def a_snooze(ctx: JobContext) -> int:
        if ctx.attempt == 1:
            raise Snooze(0.05)
        return ctx.attempt

    failing, snoozing = a_fail.enqueue(), a_snooze.enqueue()
    start_worker(poll_interval=0.05)
    assert "KeyError: 'missing'" in wait_state(conn, failing, "dead")["error"]
    assert wait_state(conn, snoozing, "completed")["result"] == 2


def test_unknown_task_is_dead_and_never_imported(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    """Never imported by name; dead once no live worker has registered it for the unserved task timeout."""
    conn.execute("UPDATE pgsched.config SET unserved_task_timeout = '1 second'")
    sys.modules.pop("tests.integration._trap", None)
    ids = [
        app.enqueue("tests.integration._trap.run", {}, max_attempts=5),
        app.enqueue("tests.integration._trap:run", {}),
        app.enqueue("os.system", {"command": "false"}),
    ]
    worker = start_worker()
    for job_id in ids:
        dead = wait_state(conn, job_id, "dead")
        assert "unknown task" in dead["error"]
        assert dead["max_attempts"] - dead["attempt"] >= 4  # passing over spent no attempt
    assert "tests.integration._trap" not in sys.modules
    wait_for(lambda: worker.worker.counts["dead"] == 3, what="dead counted")


def test_a_sync_wrapper_around_a_coroutine_function_is_awaited(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    ran: list[int] = []

    async def real(x: int) -> int:
        await asyncio.sleep(0)
        assert current_job().args == {"x": x}
        ran.append(x)
        return x * 2

    @functools.wraps(real)
    def wrapper(*args: Any, **kwargs: Any) -> Any:  # a decorator that hides the coroutine function
        return real(*args, **kwargs)

    task = app.task(name="wrapped.async")(wrapper)
    assert not task.is_async
    job_id = task.enqueue(3)
    start_worker()
    assert wait_state(conn, job_id, "completed")["result"] == 6
    assert ran == [3]


def test_a_slow_housekeeping_pass_never_holds_up_a_claim(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Housekeeping (promotions, lease expiry, roll-ups) runs on a thread and a connection of its own: a pass
    that takes long, as expiring leases does while something pins the xmin horizon, delays no claim."""
    from pgsched.runtime.housekeeping import LoneHousekeeping

    release = threading.Event()
    passes: list[float] = []
    original = LoneHousekeeping.run_duties

    def slow(self: LoneHousekeeping, db: Any) -> None:
        original(self, db)
        passes.append(time.monotonic())
        release.wait(30.0)  # a pass that takes half a minute (or until the test ends)

    monkeypatch.setattr(LoneHousekeeping, "run_duties", slow)

    @app.task(name="quick")
    def quick() -> None: ...

    start_worker()
    try:
        wait_for(lambda: passes, what="the first housekeeping pass")
        job_id = quick.enqueue()
        wait_state(conn, job_id, "completed", timeout=10.0)  # within the 30 s the pass still takes
    finally:
        release.set()


def test_a_slow_lease_expiry_pass_spaces_out_the_next(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """While something pins the xmin horizon, expiring leases reads every dead index entry of the jobs run since
    and can take seconds: the next pass then waits EXPIRY_SPACING times as long, not a quarter of the lease."""
    from pgsched.db.dbconn import Reconnecting
    from pgsched.runtime import housekeeping
    from pgsched.runtime.housekeeping import EXPIRY_SPACING, LoneHousekeeping

    keeper = LoneHousekeeping("w-spacing", enabled=True, poll_interval=0.1, lease=4.0)
    db = Reconnecting(dsn, purpose="test housekeeping", stop=threading.Event(), prepare=False)
    try:
        monkeypatch.setattr(
            housekeeping.queries,
            "EXPIRE_LEASES",
            "SELECT (SELECT pgsched.expire_leases()) FROM pg_sleep(0.2)",  # a pass that takes 0.2 s
        )
        began = time.monotonic()
        keeper.run_duties(db)
        # (without the spacing: a quarter of the lease, 1 s)
        assert keeper._next_expiry - began >= EXPIRY_SPACING * 0.2
    finally:
        db.close()
