"""Cancellation reaches running handlers; a lost lease makes a run's outcome worthless, and it is never written."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgsched import App, JobContext
from pgsched.runtime.heartbeater import Heartbeater
from tests.integration.conftest import Running, events, job, wait_for, wait_state

# Also run on the second PostgreSQL version CI tests (a smoke of the worker tier).
pytestmark = pytest.mark.smoke

StartWorker = Callable[..., Running]

LEASE = 3.0  # heartbeats every second by default
BEAT = 0.5  # a quicker heartbeat, for quicker tests


def cancel(app: App, job_id: int) -> float:
    """Request cancellation; returns when (monotonic) it was requested."""
    assert app.cancel(job_id) == "cancel_requested"
    return time.monotonic()


def test_sync_handler_sleeping_on_the_context_is_cancelled(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    started = threading.Event()

    @app.task(name="cancel.sleeper")
    def sleeper(ctx: JobContext) -> str:
        started.set()
        for _ in range(200):  # ten seconds at most
            if ctx.sleep(0.05):
                break
        ctx.raise_if_cancelled()
        return "ran to the end"

    job_id = sleeper.enqueue()
    start_worker(lease=LEASE)
    assert started.wait(5)
    asked = cancel(app, job_id)
    row = wait_state(conn, job_id, "cancelled", "completed", timeout=LEASE)
    assert row["state"] == "cancelled"
    assert time.monotonic() - asked < LEASE / 3 + 1.0
    assert [e["kind"] for e in events(conn, job_id)][-2:] == ["cancel_requested", "cancelled"]


def test_sync_handler_polling_cancel_requested_is_cancelled(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    seen: list[bool] = []

    @app.task(name="cancel.poller")
    def poller(ctx: JobContext) -> None:
        deadline = time.monotonic() + 10
        while not ctx.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(ctx.cancel_requested)
        ctx.raise_if_cancelled()

    job_id = poller.enqueue()
    start_worker(lease=LEASE, heartbeat_interval=BEAT)
    wait_state(conn, job_id, "running")
    asked = cancel(app, job_id)
    assert wait_state(conn, job_id, "cancelled", "completed", timeout=LEASE)["state"] == "cancelled"
    assert time.monotonic() - asked < BEAT + 1.0
    assert seen == [True]


def test_async_handler_gets_cancelled_error(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    got: list[str] = []
    started = threading.Event()

    @app.task(name="cancel.async")
    async def waiter() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            got.append("CancelledError")
            raise

    job_id = waiter.enqueue()
    start_worker(lease=LEASE, heartbeat_interval=BEAT)
    assert started.wait(5)
    asked = cancel(app, job_id)
    assert wait_state(conn, job_id, "cancelled", "completed", timeout=LEASE)["state"] == "cancelled"
    assert time.monotonic() - asked < BEAT + 1.0
    assert got == ["CancelledError"]


def test_cancel_of_a_waiting_job_is_immediate_and_it_never_runs(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    ran: list[int] = []

    @app.task(name="cancel.waiting")
    def never(i: int) -> None:
        ran.append(i)

    doomed, other = never.enqueue(1), never.enqueue(2)
    assert app.cancel(doomed) == "cancelled"
    start_worker()
    wait_state(conn, other, "completed")
    assert ran == [2]
    assert job(conn, doomed)["state"] == "cancelled"  # type: ignore[index]
    assert app.cancel(doomed) == "already_cancelled"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_cancel_of_a_job_waiting_for_a_slot_does_not_start_it(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker, kind: str
) -> None:
    release = threading.Event()
    blocking = threading.Event()
    ran: list[str] = []

    @app.task(name="slot.blocker")
    def blocker() -> None:
        blocking.set()
        release.wait(10)

    @app.task(name="slot.sync")
    def queued_sync() -> None:
        ran.append("sync")

    @app.task(name="slot.async")
    async def queued_async() -> None:
        ran.append("async")

    first = blocker.enqueue()
    running = start_worker(lease=LEASE, heartbeat_interval=BEAT, concurrency=1, prefetch=1)
    assert blocking.wait(5)
    queued = (queued_sync if kind == "sync" else queued_async).enqueue()
    wait_state(conn, queued, "running")  # leased ahead, waiting for the only slot
    asked = cancel(app, queued)

    def told() -> bool:
        ctx = running.worker._held.get(queued)
        return ctx is not None and ctx.cancel_requested

    wait_for(told, timeout=LEASE, what="the cancel request delivered by a heartbeat")
    told_after = time.monotonic() - asked  # the promise: delivered within a lease (not the blocker's end after it)
    release.set()
    assert wait_state(conn, queued, "cancelled", "completed", timeout=30)["state"] == "cancelled"
    assert told_after < LEASE
    wait_state(conn, first, "completed")
    assert ran == []


def take_over(dsn: str, job_id: int, worker: str = "other-worker") -> int:
    """Expire the job's lease and claim it as another worker, in one transaction; returns the new token."""
    with psycopg.connect(dsn) as other:
        other.execute("UPDATE pgsched.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [job_id])
        other.execute("SELECT pgsched.expire_leases()")
        rows = other.execute(
            "SELECT id, lease_token, attempt FROM pgsched.claim(%s, ARRAY['default'], 10, '30 seconds')", [worker]
        ).fetchall()
    assert [r[0] for r in rows] == [job_id]
    assert rows[0][2] == 2
    return int(rows[0][1])


def complete_as(dsn: str, job_id: int, token: int, result: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as other:
        row = other.execute(
            "SELECT accepted FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ARRAY[%s]::jsonb[])",
            [job_id, token, result],
        ).fetchone()
    assert row is not None
    return bool(row[0])


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_lost_lease_is_seen_by_heartbeat_and_the_stale_result_is_never_written(
    app: App,
    dsn: str,
    conn: psycopg.Connection[Any],
    start_worker: StartWorker,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    noticed = threading.Event()

    @app.task(name="lease.sync")
    def sync_handler(ctx: JobContext) -> str:
        deadline = time.monotonic() + 10
        while not ctx.lease_lost and time.monotonic() < deadline:
            time.sleep(0.01)
        if ctx.lease_lost:
            noticed.set()
        return "first owner"

    @app.task(name="lease.async")
    async def async_handler(ctx: JobContext) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            if ctx.lease_lost:
                noticed.set()
        return "first owner"

    caplog.set_level(logging.WARNING, logger="pgsched")
    job_id = (sync_handler if kind == "sync" else async_handler).enqueue()
    running = start_worker(lease=LEASE, heartbeat_interval=BEAT)
    # started, not just claimed: a job taken over before its start never starts
    wait_for(lambda: (job(conn, job_id) or {}).get("started_at") is not None, what="the handler started")
    first_token = wait_state(conn, job_id, "running")["lease_token"]
    new_token = take_over(dsn, job_id)
    assert new_token > first_token
    assert noticed.wait(LEASE), "the handler was not told that its lease is gone"
    wait_for(lambda: running.worker.counts["lost"] == 1, what="the run counted as lost")
    # Still the second owner's: nothing the first run did reached the row.
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["lease_token"]) == ("running", new_token)
    assert complete_as(dsn, job_id, new_token, '"second owner"')
    done = wait_state(conn, job_id, "completed")
    assert (done["result"], done["leased_by"], done["attempt"]) == ("second owner", "other-worker", 2)
    assert conn.execute("SELECT count(*) AS n FROM pgsched.job_history WHERE id = %s", [job_id]).fetchone() == {"n": 1}
    assert any("lease" in r.getMessage() and str(job_id) in r.getMessage() for r in caplog.records)


def test_completion_with_a_stale_token_is_rejected_and_logged(
    app: App,
    dsn: str,
    conn: psycopg.Connection[Any],
    start_worker: StartWorker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    go = threading.Event()

    @app.task(name="lease.late")
    def late() -> str:
        go.wait(10)
        return "first owner"

    caplog.set_level(logging.WARNING, logger="pgsched")
    job_id = late.enqueue()
    # A long lease: no heartbeat comes before the handler returns, so the
    # completion itself meets the stale token.
    running = start_worker(lease=60)
    # started, not just claimed: a job taken over before its start never starts
    wait_for(lambda: (job(conn, job_id) or {}).get("started_at") is not None, what="the handler started")
    first_token = wait_state(conn, job_id, "running")["lease_token"]
    new_token = take_over(dsn, job_id)
    go.set()
    wait_for(lambda: running.worker.counts["lost"] == 1, what="the completion rejected")
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["lease_token"]) == ("running", new_token)
    assert not complete_as(dsn, job_id, first_token, '"replayed"')
    assert complete_as(dsn, job_id, new_token, '"second owner"')
    assert wait_state(conn, job_id, "completed")["result"] == "second owner"
    assert any("rejected" in r.getMessage() and str(job_id) in r.getMessage() for r in caplog.records)
    assert [e["worker"] for e in events(conn, job_id, "completed")] == ["other-worker"]


def test_a_hung_cancel_poll_still_tells_the_handlers_within_a_lease(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Without LISTEN the heartbeat thread also polls for cancels; a poll that hangs (a partition, a frozen
    server) holds up the beats as much as a hung beat does, so the watchdog must count it too."""
    job_id = conn.execute("SELECT pgsched.enqueue('hb.hang', '{}') AS id").fetchone()["id"]  # type: ignore[index]
    token = conn.execute(
        "SELECT lease_token FROM pgsched.claim('hb', ARRAY['default'], 1, interval '1 hour')"
    ).fetchone()["lease_token"]  # type: ignore[index]
    lost = threading.Event()
    lease = 1.5
    beater = Heartbeater(
        dsn,
        worker="hb",
        lease=lease,
        interval=1.0,
        held=lambda: [(job_id, token)],
        on_lost=lambda _job: lost.set(),
        on_cancel=lambda _job: None,
        stop=threading.Event(),
        listening=lambda: False,
        cancel_poll=0.1,
    )
    beater.start()
    with psycopg.connect(dsn) as locker:
        try:
            wait_for(lambda: beater.beats >= 1 and beater.cancel_polls >= 1, what="a beat and a cancel poll")
            polls = beater.cancel_polls
            wait_for(lambda: beater.cancel_polls > polls, what="the next cancel poll")
            # Freeze every statement on the jobs table right after a poll: the next call is a poll, and it hangs.
            locker.execute("LOCK TABLE pgsched.jobs IN ACCESS EXCLUSIVE MODE")
            frozen = time.monotonic()
            assert lost.wait(lease + 5.0), "the handlers were never told while the cancel poll hung"
            # told for the silence, not by a heartbeat's answer: a whole lease since the last good beat began (the
            # beat due just before the lock may start just after it, so the lock itself is no sound reference)
            assert time.monotonic() - beater._last_ok >= lease, time.monotonic() - frozen
        finally:
            locker.rollback()
            beater.close()
