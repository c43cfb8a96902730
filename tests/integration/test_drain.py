"""App.drain(): due jobs run in the calling thread through the real claim/complete path, until none is due."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgsched import App, JobContext, JobState, Snooze


def test_drain_runs_due_jobs_of_every_queue_and_leaves_later_ones(app: App, conn: psycopg.Connection[Any]) -> None:
    seen: list[tuple[int, int]] = []

    @app.task(name="d.add", queue="math")
    def add(a: int, b: int, ctx: JobContext) -> int:
        seen.append((ctx.id, ctx.attempt))
        return a + b

    @app.task(name="d.async")
    async def later(x: int) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"x": x}

    first = add.enqueue(1, 2)
    second = later.enqueue(5)
    delayed = add.using(delay=timedelta(hours=1)).enqueue(3, 4)
    result = app.drain()
    assert (result.completed, result.ran) == (2, 2)
    assert sorted(result.job_ids) == sorted([first, second])
    assert seen == [(first, 1)]
    assert first.wait(timeout=5) == 3
    assert second.wait(timeout=5) == {"x": 5}
    assert delayed.state() is JobState.SCHEDULED
    history = conn.execute(
        "SELECT id, leased_by FROM pgsched.job_history WHERE id = ANY(%s) ORDER BY id", [[first, second]]
    ).fetchall()
    assert all(row["leased_by"].startswith("drain:") for row in history)
    assert app.drain().ran == 0


def test_drain_runs_jobs_that_jobs_enqueue(app: App) -> None:
    @app.task(name="d.leaf")
    def leaf(n: int) -> int:
        return n

    @app.task(name="d.fan")
    def fan(n: int) -> None:
        for i in range(n):
            leaf.enqueue(i)

    fan.enqueue(3)
    assert app.drain().completed == 4


def test_a_failure_is_retried_later_and_can_be_raised_here(app: App) -> None:
    @app.task(name="d.broken", max_attempts=2)
    def broken() -> None:
        raise KeyError("missing")

    job = broken.enqueue()
    result = app.drain()
    assert (result.retried, result.completed) == (1, 0)
    assert job.state() is JobState.SCHEDULED  # its backoff: not due again at once, so the drain ended

    other = broken.enqueue()
    with pytest.raises(KeyError, match="missing"):
        app.drain(raise_errors=True)
    assert other.status().error is not None


def test_steering_exceptions_are_not_raised(app: App) -> None:
    @app.task(name="d.snooze")
    def snooze() -> None:
        raise Snooze(timedelta(hours=1))

    job = snooze.enqueue()
    assert app.drain(raise_errors=True).snoozed == 1
    assert job.state() is JobState.SCHEDULED


def test_unknown_tasks_go_dead_and_limit_bounds_the_runs(app: App) -> None:
    job = app.enqueue("d.nobody")
    assert app.drain().dead == 1
    assert job.state() is JobState.DEAD

    @app.task(name="d.again")
    def again() -> None:
        raise Snooze(0)  # due again at once: only the limit ends this drain

    again.enqueue()
    assert app.drain(limit=5).ran == 5


def test_drain_inside_the_callers_transaction_rolls_back_with_it(app: App, dsn: str) -> None:
    @app.task(name="d.inside")
    def inside() -> str:
        return "ran"

    with psycopg.connect(dsn) as tx:
        job = inside.enqueue(conn=tx)
        assert app.drain(conn=tx, queues=["default"]).completed == 1
        assert job.status(conn=tx).result == "ran"
        tx.rollback()
    assert app.drain().ran == 0
    with pytest.raises(Exception, match="not visible"):
        job.status()
