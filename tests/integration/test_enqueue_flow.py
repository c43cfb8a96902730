"""App.enqueue and tasks with on_conflict (replace: a debounce) and key_scope, through the Python API."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgsched import App, JobSpec, ReplaceRefused


def test_replace_from_python_keeps_the_id_and_takes_the_new_args(app: App) -> None:
    first = app.enqueue("t.flush", {"n": 1}, idempotency_key="u:1", delay=timedelta(hours=1))
    again = app.enqueue("t.flush", {"n": 2}, idempotency_key="u:1", delay=timedelta(seconds=5), on_conflict="replace")
    assert again.id == first.id
    with app.connect() as conn:
        row = conn.execute("SELECT args, run_at - now() < interval '1 minute' FROM pgsched.jobs").fetchone()
    assert row == ({"n": 2}, True)


def test_replace_of_a_running_job_raises_replace_refused(app: App) -> None:
    job = app.enqueue("t.flush", {}, idempotency_key="u:1")
    with app.connect() as conn:
        conn.execute("SELECT * FROM pgsched.claim('w', '{default}', 1, '1 minute', '{}', NULL)")
    with pytest.raises(ReplaceRefused, match=f"job {job.id}, which is running"):
        app.enqueue("t.flush", {"n": 2}, idempotency_key="u:1", on_conflict="replace")


def test_key_scope_per_task_and_per_job(app: App) -> None:
    @app.task(name="t.scoped", key_scope="active")
    def scoped() -> None: ...

    first = scoped.using(idempotency_key="k").enqueue()
    assert scoped.using(idempotency_key="k").enqueue().id == first.id
    app.cancel(first.id)
    second = scoped.using(idempotency_key="k").enqueue()
    assert second.id != first.id
    # A job's own scope wins over its task's.
    kept = scoped.using(idempotency_key="r", key_scope="retention").enqueue()
    app.cancel(kept.id)
    assert scoped.using(idempotency_key="r").enqueue().id == kept.id
    # Batches carry the scope too.
    (batched,) = app.enqueue_many([scoped.using(idempotency_key="b").job()])
    app.cancel(batched.id)
    assert app.enqueue("t.scoped", idempotency_key="b").id != batched.id


def test_bad_options_are_refused_before_anything_is_written(app: App) -> None:
    with pytest.raises(ValueError, match="on_conflict"):
        JobSpec(task="t", on_conflict="overwrite")
    with pytest.raises(ValueError, match="key_scope"):
        JobSpec(task="t", key_scope="forever")
    with pytest.raises(ValueError, match="key_scope of task"):
        app.task(name="t.bad", key_scope="forever")(lambda: None)
    with pytest.raises(ValueError, match="replace one job at a time"):
        app.enqueue_many([JobSpec(task="t", idempotency_key="k", on_conflict="replace")])
