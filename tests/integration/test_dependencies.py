"""Dependencies from Python: using(depends_on=...), graphs in one enqueue_many, a 1,000-job graph run by workers."""

from __future__ import annotations

import random
from typing import Any

import psycopg
import pytest

from pgsched import App, InvalidJob, JobSpec, JobState, Ref
from tests.integration.conftest import wait_for

# Also run on the second PostgreSQL version CI tests (a smoke of the worker tier).
pytestmark = pytest.mark.smoke


def test_using_depends_on_takes_handles_and_ids(app: App) -> None:
    order: list[str] = []

    @app.task(name="dep.step")
    def step(name: str) -> str:
        order.append(name)
        return name

    first = step.enqueue("first")
    second = step.using(depends_on=[first]).enqueue("second")
    third = step.using(depends_on=[int(first), second]).enqueue("third")
    assert (second.state(), third.state()) == (JobState.WAITING, JobState.WAITING)
    assert app.drain().ran == 3
    assert order == ["first", "second", "third"]
    assert third.wait(timeout=5) == "third"
    by_name = app.enqueue("dep.step", {"name": "fourth"}, depends_on=[third])
    assert by_name.state() is JobState.AVAILABLE  # a completed dependency is met at once


def test_a_graph_in_one_enqueue_many_by_spec_or_position(app: App) -> None:
    order: list[str] = []

    @app.task(name="dep.node")
    def node(name: str) -> None:
        order.append(name)

    extract = node.job("extract")
    transform = node.using(depends_on=[extract]).job("transform")
    check = node.using(depends_on=[Ref(0)]).job("check")
    load = node.using(depends_on=[transform, check]).job("load")
    ids = app.enqueue_many([extract, transform, check, load])
    assert [h.state() for h in ids] == [JobState.AVAILABLE, JobState.WAITING, JobState.WAITING, JobState.WAITING]
    while app.drain().ran:
        pass
    assert order[0] == "extract"
    assert order[-1] == "load"
    assert sorted(order[1:3]) == ["check", "transform"]


def test_bad_dependencies_are_refused_before_anything_is_written(app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="dep.x")
    def x() -> None: ...

    outside = x.job()
    with pytest.raises(ValueError, match="not in this batch"):
        app.enqueue_many([x.job(), x.using(depends_on=[outside]).job()])
    with pytest.raises(InvalidJob, match=r"row 1 of the batch.*refers to row 2"):
        app.enqueue_many([x.using(depends_on=[Ref(1)]).job(), x.job()])
    with pytest.raises(InvalidJob, match="row 2 of the batch: depends_on 99999: no such job"):
        app.enqueue_many([x.job(), x.using(depends_on=[Ref(0), 99999]).job()])
    with pytest.raises(TypeError, match="enqueue_many"):
        x.using(depends_on=[outside]).enqueue()
    with pytest.raises(ValueError, match="depends_on"):
        x.using(depends_on=[0]).job()
    with pytest.raises(ValueError, match="on_dependency_failure"):
        x.using(on_dependency_failure="skip").job()
    with pytest.raises(ValueError, match="0-based"):
        Ref(-1)
    assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone() == {"n": 0}


def test_a_failed_dependency_cancels_or_leaves_waiting_by_policy(app: App) -> None:
    @app.task(name="dep.flaky", max_attempts=1)
    def flaky() -> None:
        raise RuntimeError("broken")

    @app.task(name="dep.after")
    def after() -> None: ...

    root = flaky.enqueue()
    cancelled = after.using(depends_on=[root]).enqueue()
    waits = after.using(depends_on=[root], on_dependency_failure="wait").enqueue()
    app.drain()
    assert root.status().state is JobState.DEAD
    status = cancelled.status()
    assert (status.state, status.error) == (JobState.CANCELLED, f"dependency {root} dead")
    assert waits.state() is JobState.WAITING


def layered_dag(n: int, seed: int = 12) -> list[list[int]]:
    """Dependencies (0-based positions, always earlier) of n jobs in layers of 1 to 40, 1 to 4 per job."""
    rng = random.Random(seed)
    deps: list[list[int]] = []
    layer_start, previous = 0, range(0)
    while len(deps) < n:
        width = min(rng.randint(1, 40), n - len(deps))
        layer_start = len(deps)
        for _ in range(width):
            deps.append(sorted(rng.sample(list(previous), min(len(previous), rng.randint(1, 4)))) if previous else [])
        previous = range(layer_start, layer_start + width)
    return deps


def test_a_1000_job_graph_runs_in_dependency_order(app: App, conn: psycopg.Connection[Any], start_worker: Any) -> None:
    """No job starts before every one of its dependencies finished (history: started_at vs finished_at)."""

    @app.task(name="dag.node")
    def node(i: int) -> int:
        return i

    deps = layered_dag(1000)
    specs: list[JobSpec] = [node.using(depends_on=[Ref(d) for d in ds]).job(i) for i, ds in enumerate(deps)]
    ids = [int(h) for h in app.enqueue_many(specs)]
    assert conn.execute("SELECT count(*) AS n FROM pgsched.job_dependencies").fetchone() == {
        "n": sum(len(ds) for ds in deps)
    }
    for _ in range(2):
        start_worker(concurrency=8)

    def finished() -> bool:
        row = conn.execute(
            "SELECT count(*) AS n FROM pgsched.job_history WHERE id = ANY(%s) AND state = 'completed'", [ids]
        ).fetchone()
        return bool(row and row["n"] == len(ids))

    wait_for(finished, timeout=300, interval=0.2, what="1000 jobs completed")
    edges = [(ids[i], ids[d]) for i, ds in enumerate(deps) for d in ds]
    late = conn.execute(
        """
        SELECT e.job, e.dep, j.started_at, d.finished_at
        FROM unnest(%s::bigint[], %s::bigint[]) AS e(job, dep)
        JOIN pgsched.job_history j ON j.id = e.job
        JOIN pgsched.job_history d ON d.id = e.dep
        WHERE j.started_at IS NULL OR j.started_at < d.finished_at
        """,
        [[e[0] for e in edges], [e[1] for e in edges]],
    ).fetchall()
    assert late == []
    assert len(edges) > 1500
    assert conn.execute("SELECT count(*) AS n FROM pgsched.job_dependencies").fetchone() == {"n": 0}
