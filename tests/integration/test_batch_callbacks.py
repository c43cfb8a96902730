"""Batch callbacks from Python: enqueue_many(specs, then=callback.job()) runs once after the whole batch
finished, whatever the outcomes, and the handler reads them in ctx.dependencies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pgsched import App, Dependency, JobContext, JobSpec, JobState
from tests.integration.conftest import Running, wait_for


def test_a_worker_runs_the_callback_once_with_every_outcome(app: App, start_worker: Callable[..., Running]) -> None:
    seen: list[tuple[Dependency, ...]] = []

    @app.task(name="batch.member", max_attempts=1)
    def member(n: int) -> dict[str, int]:
        if n == 1:
            raise RuntimeError("member 1 broke")
        return {"n": n}

    @app.task(name="batch.done")
    def done(label: str, ctx: JobContext) -> None:
        seen.append(ctx.dependencies)

    handles = app.enqueue_many([member.job(n) for n in range(3)], then=done.job("all three"))
    assert len(handles) == 4
    assert handles[-1].state() is JobState.WAITING
    start_worker(concurrency=2)
    wait_for(lambda: handles[-1].state() is JobState.COMPLETED, what="the callback to complete")
    assert len(seen) == 1
    assert [(d.id, d.state) for d in seen[0]] == [
        (handles[0].id, "completed"),
        (handles[1].id, "dead"),
        (handles[2].id, "completed"),
    ]
    assert seen[0][0].result == {"n": 0}
    assert "member 1 broke" in (seen[0][1].error or "")


def test_drain_reads_dependencies_on_its_own_connection(app: App) -> None:
    results: list[Any] = []

    @app.task(name="batch.leaf")
    def leaf(n: int) -> int:
        return n * 10

    @app.task(name="batch.sum")
    def total(ctx: JobContext) -> None:
        results.append(sum(d.result for d in ctx.dependencies))

    app.enqueue_many([leaf.job(n) for n in range(1, 4)], then=total.job())
    while app.drain().ran:
        pass
    assert results == [60]


def test_then_keeps_a_policy_it_was_given_and_refuses_bad_input(app: App) -> None:
    @app.task(name="batch.x")
    def x() -> None: ...

    handles = app.enqueue_many([x.job()], then=x.using(on_dependency_failure="cancel").job())
    with app.connect() as conn:
        row = conn.execute(
            "SELECT on_failure FROM pgsched.job_dependencies WHERE job = %s", [handles[-1].id]
        ).fetchone()
    assert row == ("cancel",)
    with pytest.raises(ValueError, match="batch is empty"):
        app.enqueue_many([], then=x.job())
    with pytest.raises(TypeError, match="JobSpec"):
        app.enqueue_many([x.job()], then="batch.x")  # type: ignore[arg-type]
    assert JobSpec(task="t", on_dependency_failure="run").on_dependency_failure == "run"
