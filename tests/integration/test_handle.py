"""Job handles: enqueue still returns the id (an int), which can also report the job and wait for its result."""

from __future__ import annotations

import asyncio
import json
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgsched import App, JobState
from pgsched.core.handle import JobHandle
from pgsched.errors import JobDead, JobNotFound, JobWasCancelled, ResultTimeout
from tests.integration.conftest import Running, wait_for


def _tasks(app: App) -> dict[str, Any]:
    @app.task(name="h.add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="h.broken", max_attempts=1)
    def broken() -> None:
        raise ValueError("the numbers do not add up")

    return {"add": add, "broken": broken}


def test_enqueue_returns_an_int_that_works_everywhere_an_id_did(app: App, conn: psycopg.Connection[Any]) -> None:
    tasks = _tasks(app)
    job = tasks["add"].enqueue(1, 2)
    assert isinstance(job, JobHandle)
    assert isinstance(job, int)
    assert job == job.id
    assert str(job) == str(job.id)
    assert f"{job}" == str(int(job))
    assert json.dumps({"id": job}) == f'{{"id": {int(job)}}}'
    assert pickle.loads(pickle.dumps(job)) == job
    row = conn.execute("SELECT task FROM pgsched.jobs WHERE id = %s", [job]).fetchone()
    assert row == {"task": "h.add"}
    assert job.state() is JobState.AVAILABLE
    many = app.enqueue_many([tasks["add"].job(1, 1), tasks["add"].job(2, 2)])
    assert all(isinstance(h, JobHandle) for h in many)
    assert app.job(int(many[0])).status().state is JobState.AVAILABLE


def _waiting_for_event(conn: psycopg.Connection[Any]) -> bool:
    """A waiter has looked the job up once and sits in LISTEN (idle after its status query)."""
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE state = 'idle' AND query LIKE %s AND pid <> pg_backend_pid()",
        ["%FROM pgsched.job(%"],
    ).fetchone()
    return bool(row and row["n"])


def _finish_by_hand(conn: psycopg.Connection[Any], job_id: int, result: Any) -> None:
    (leased,) = conn.execute(
        "SELECT id, lease_token FROM pgsched.claim('w', ARRAY['default'], 1, interval '1 minute')"
    ).fetchall()
    assert leased["id"] == job_id
    conn.execute(
        "SELECT * FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ARRAY[%s::jsonb])",
        [job_id, leased["lease_token"], json.dumps(result)],
    )


def test_wait_is_woken_by_the_status_event_not_by_polling(app: App, conn: psycopg.Connection[Any]) -> None:
    job = _tasks(app)["add"].enqueue(2, 3)
    got: list[Any] = []
    took: list[float] = []

    def waiter() -> None:
        started = time.monotonic()
        got.append(job.wait(timeout=60, poll_interval=120))
        took.append(time.monotonic() - started)

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_for(lambda: _waiting_for_event(conn), timeout=30, what="the waiter listening")
    _finish_by_hand(conn, job, {"sum": 5})
    thread.join(timeout=45)
    assert not thread.is_alive()
    # Its only poll was before the job finished; the next would be 120 s later.
    assert got == [{"sum": 5}]
    assert took[0] < 45


def test_wait_returns_what_the_handler_returned(app: App, start_worker: Callable[..., Running]) -> None:
    tasks = _tasks(app)
    start_worker()
    assert tasks["add"].enqueue(20, 22).wait(timeout=30) == 42


def test_wait_raises_job_dead_with_the_error(app: App, start_worker: Callable[..., Running]) -> None:
    tasks = _tasks(app)
    start_worker()
    job = tasks["broken"].enqueue()
    with pytest.raises(JobDead, match="the numbers do not add up") as info:
        job.wait(timeout=30)
    assert info.value.job_id == job
    assert info.value.state == "dead"
    assert info.value.attempt == 1
    assert info.value.error is not None
    assert "Traceback" in info.value.error


def test_wait_raises_on_cancelled_and_on_timeout(app: App) -> None:
    tasks = _tasks(app)
    job = tasks["add"].enqueue(1, 1)
    with pytest.raises(ResultTimeout, match="still available"):
        job.wait(timeout=0.3)
    with pytest.raises(TimeoutError):  # ResultTimeout is one too
        job.wait(timeout=0.01)
    assert app.cancel(job) == "cancelled"
    with pytest.raises(JobWasCancelled):
        job.wait(timeout=5)


def test_wait_on_a_job_not_committed_yet_says_so(app: App, dsn: str) -> None:
    tasks = _tasks(app)
    with psycopg.connect(dsn) as tx:
        job = tasks["add"].enqueue(1, 1, conn=tx)
        with pytest.raises(JobNotFound, match="not committed yet"):
            job.wait(timeout=1)
        tx.rollback()


def test_wait_falls_back_to_polling_when_events_are_off(app: App, conn: psycopg.Connection[Any]) -> None:
    conn.execute("UPDATE pgsched.config SET events = false")
    job = _tasks(app)["add"].enqueue(1, 1)
    _finish_by_hand(conn, job, 7)
    assert job.wait(timeout=10, poll_interval=0.1) == 7


def test_wait_async(app: App, conn: psycopg.Connection[Any]) -> None:
    add = _tasks(app)["add"]
    job = add.enqueue(3, 4)

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(job.wait_async(timeout=60, poll_interval=120))
        deadline = time.monotonic() + 30
        while not _waiting_for_event(conn):
            assert time.monotonic() < deadline, "the async waiter never listened"
            await asyncio.sleep(0.02)
        _finish_by_hand(conn, job, "seven")
        return await asyncio.wait_for(waiting, 45)

    assert asyncio.run(scenario()) == "seven"

    async def cancelled() -> None:
        other = add.enqueue(1, 1)
        app.cancel(other)
        with pytest.raises(JobWasCancelled):
            await other.wait_async(timeout=5)
        with pytest.raises(ResultTimeout):
            await add.enqueue(1, 1).wait_async(timeout=0.2)

    asyncio.run(cancelled())
