"""Async enqueue: task.enqueue_async, app.enqueue_many_async and app.cancel_async in the caller's AsyncConnection
transaction (rolled back with it), or on the app's own async connection."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from pgsched import App, IdempotencyConflict, InvalidJob, JobSpec
from tests.integration.conftest import job

# Also run on the second PostgreSQL version CI tests (a smoke of the worker tier).
pytestmark = pytest.mark.smoke

Conn = psycopg.Connection[Any]


async def handler(n: int) -> None:
    """Registered by the tests below."""


def count(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone()
    assert row is not None
    return int(row["n"])


def test_enqueue_async_in_the_callers_transaction_rolls_back_and_commits_with_it(
    app: App, dsn: str, conn: Conn
) -> None:
    task = app.task(name="async.task", queue="mail")(handler)

    async def main() -> tuple[int, list[int]]:
        async with await psycopg.AsyncConnection.connect(dsn) as caller:
            await task.enqueue_async(1, conn=caller)
            await app.enqueue_many_async([task.job(2), task.using(labels=["gpu"]).job(3)], conn=caller)
            assert count(conn) == 0  # not visible before the caller commits
            await caller.rollback()
            assert count(conn) == 0
            one = await task.using(priority=0, idempotency_key="a-1").enqueue_async(4, conn=caller)
            many = await app.enqueue_many_async([task.job(5), task.using(labels=["gpu"]).job(6)], conn=caller)
            await caller.commit()
        return one, many

    one, many = asyncio.run(main())
    assert count(conn) == 3
    row = job(conn, one)
    assert row is not None
    assert (row["args"], row["queue"], row["idempotency_key"]) == ({"n": 4}, "mail", "a-1")
    labelled = job(conn, many[1])
    assert labelled is not None
    assert labelled["labels"] == ["gpu"]


def test_cancel_async_in_the_callers_transaction(app: App, dsn: str, conn: Conn) -> None:
    task = app.task(name="async.cancel")(handler)
    job_id = task.enqueue(1)

    async def main() -> tuple[str, str]:
        async with await psycopg.AsyncConnection.connect(dsn) as caller:
            said = await app.cancel_async(job_id, conn=caller)
            await caller.rollback()
        still = job(conn, job_id)
        assert still is not None
        assert still["state"] == "available"  # the cancel rolled back with the caller
        async with await psycopg.AsyncConnection.connect(dsn) as caller:
            again = await app.cancel_async(job_id, conn=caller)
            await caller.commit()
        return said, again

    assert asyncio.run(main()) == ("cancelled", "cancelled")
    done = job(conn, job_id)
    assert done is not None
    assert done["state"] == "cancelled"


def test_without_conn_the_app_uses_an_async_connection_of_its_own(app: App, conn: Conn) -> None:
    task = app.task(name="async.own")(handler)

    async def main() -> list[int]:
        ids = await asyncio.gather(*(task.enqueue_async(i) for i in range(20)))
        ids += await app.enqueue_many_async([task.job(i) for i in range(100, 110)])
        assert await app.cancel_async(ids[0]) == "cancelled"
        return list(ids)

    ids = asyncio.run(main())
    assert len(set(ids)) == 30
    assert count(conn) == 29
    # A second event loop opens its own connection.
    assert asyncio.run(task.enqueue_async(999)) > 0
    assert count(conn) == 30
    assert app.enqueue_many([]) == []


def test_async_errors_are_the_same_and_leave_nothing(app: App, dsn: str, conn: Conn) -> None:
    task = app.task(name="async.bad")(handler)

    async def main() -> None:
        with pytest.raises(InvalidJob, match="row 2 of the batch: queue 'no spaces'"):
            await app.enqueue_many_async([task.job(1), JobSpec(task="async.bad", queue="no spaces")])
        await task.using(idempotency_key="k").enqueue_async(1)
        with pytest.raises(IdempotencyConflict):
            await task.using(idempotency_key="k").enqueue_async(2)
        with pytest.raises(ValueError, match="max_attempts"):
            await task.using(max_attempts=0).enqueue_async(1)
        with psycopg.connect(dsn) as sync_conn, pytest.raises(TypeError, match="AsyncConnection"):
            await task.enqueue_async(1, conn=sync_conn)  # type: ignore[arg-type]

    asyncio.run(main())
    assert count(conn) == 1


def test_an_async_connection_handed_to_the_sync_calls_is_a_clear_error(app: App, dsn: str, conn: Conn) -> None:
    task = app.task(name="async.mixed")(handler)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as async_conn:
            with pytest.raises(TypeError, match="goes with the async calls"):
                task.enqueue(1, conn=async_conn)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="goes with the async calls"):
                app.enqueue_many([task.job(1), task.job(2)], conn=async_conn)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="goes with the async calls"):
                app.cancel(1, conn=async_conn)  # type: ignore[arg-type]

    asyncio.run(main())
    assert count(conn) == 0
