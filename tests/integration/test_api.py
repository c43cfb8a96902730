"""The producer API: task registration, enqueue in the caller's transaction, options and argument binding."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgsched import App, InvalidJob, JobContext, JobSpec, TaskAlreadyRegistered
from tests.integration.conftest import job


def send_welcome(user_id: int) -> None:
    """A module-level handler, registered by the tests below."""


def count_jobs(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone()
    assert row is not None
    return int(row["n"])


def test_task_name_defaults_to_module_and_function(app: App, conn: psycopg.Connection[Any]) -> None:
    task = app.task(send_welcome)
    assert task.name == "tests.integration.test_api.send_welcome"
    assert app.get_task(task.name) is task
    row = job(conn, task.enqueue(42))
    assert row is not None
    assert row["task"] == "tests.integration.test_api.send_welcome"
    assert row["args"] == {"user_id": 42}


def test_default_name_of_a_nested_function_is_a_valid_task_name(app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task
    def nested(x: int) -> None: ...

    assert "<" not in nested.name
    assert nested.name.startswith("tests.integration.test_api.")
    assert nested.name.endswith(".nested")
    row = job(conn, nested.enqueue(1))
    assert row is not None
    assert row["task"] == nested.name


def test_two_handlers_under_one_name_are_refused(app: App) -> None:
    app.task(name="dup")(send_welcome)

    def other(user_id: int) -> None: ...

    with pytest.raises(TaskAlreadyRegistered):
        app.task(name="dup")(other)


def test_enqueue_with_conn_rolls_back_and_commits_with_the_caller(
    app: App, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    task = app.task(name="tx.task")(send_welcome)
    with psycopg.connect(dsn) as caller:
        rolled_back = task.enqueue(1, conn=caller)
        assert job(conn, rolled_back) is None  # not visible before commit
        caller.rollback()
        committed = task.enqueue(2, conn=caller)
        caller.commit()
        in_block: list[int] = []

        def failing_unit_of_work() -> None:
            with caller.transaction():
                in_block.append(task.enqueue(3, conn=caller))
                raise RuntimeError("the caller's work failed")

        with pytest.raises(RuntimeError):
            failing_unit_of_work()
    assert job(conn, rolled_back) is None
    assert job(conn, in_block[0]) is None
    row = job(conn, committed)
    assert row is not None
    assert row["state"] == "available"
    assert row["args"] == {"user_id": 2}
    assert count_jobs(conn) == 1


def test_enqueue_many_returns_ids_in_order_in_one_statement(app: App, conn: psycopg.Connection[Any]) -> None:
    task = app.task(name="many.task")(send_welcome)
    specs = [task.job(i) for i in range(50)]
    specs.insert(10, JobSpec(task="many.task", args={"user_id": 999}, idempotency_key="same"))
    specs.append(JobSpec(task="many.task", args={"user_id": 999}, idempotency_key="same"))
    ids = app.enqueue_many(specs)
    assert len(ids) == len(specs)
    assert ids[10] == ids[-1]  # a key repeated within the batch gets the first row's job
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM pgsched.jobs").fetchall()}
    assert len(rows) == 51
    for spec, job_id in zip(specs[:-1], ids[:-1], strict=True):
        assert rows[job_id]["args"] == spec.args
    # One statement in autocommit: one transaction, so one now() for every row.
    assert len({r["created_at"] for r in rows.values()}) == 1


def test_enqueue_many_inside_the_callers_transaction(app: App, dsn: str, conn: psycopg.Connection[Any]) -> None:
    task = app.task(name="many.tx")(send_welcome)
    with psycopg.connect(dsn) as caller:
        app.enqueue_many([task.job(1), task.job(2)], conn=caller)
        caller.rollback()
    assert count_jobs(conn) == 0


def test_using_sets_per_job_options(app: App, conn: psycopg.Connection[Any]) -> None:
    task = app.task(name="opts.task", queue="emails", priority=1)(send_welcome)
    before = datetime.now(UTC)
    first = task.using(queue="urgent", delay=timedelta(seconds=60), priority=5, idempotency_key="welcome-7").enqueue(7)
    after = datetime.now(UTC)
    again = task.using(idempotency_key="welcome-7").enqueue(7)
    assert again == first
    row = job(conn, first)
    assert row is not None
    assert row["queue"] == "urgent"
    assert row["priority"] == 5
    assert row["idempotency_key"] == "welcome-7"
    assert row["state"] == "scheduled"
    assert before + timedelta(seconds=59) <= row["run_at"] <= after + timedelta(seconds=61)
    assert count_jobs(conn) == 1
    plain = job(conn, task.enqueue(9))
    assert plain is not None
    assert (plain["queue"], plain["priority"], plain["state"]) == ("emails", 1, "available")
    with pytest.raises(TypeError, match="bogus"):
        task.using(bogus=1)


def test_args_bind_by_name_and_the_context_is_not_stored(app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="bind.task")
    def handler(a: int, b: str = "x", *, ctx: JobContext, c: list[int] | None = None, **extra: Any) -> None: ...

    assert handler.context_param == "ctx"
    row = job(conn, handler.enqueue(1, "y", c=[1, 2], d=True))
    assert row is not None
    assert row["args"] == {"a": 1, "b": "y", "c": [1, 2], "d": True}
    row = job(conn, handler.enqueue(a=5))
    assert row is not None
    assert row["args"] == {"a": 5}
    with pytest.raises(TypeError):
        handler.enqueue()  # a is required
    with pytest.raises(TypeError):
        handler.enqueue(1, 2, 3)
    assert count_jobs(conn) == 2


@pytest.mark.parametrize("bad", [object(), {1, 2}, math.nan, b"bytes"])
def test_non_json_args_raise_type_error_and_enqueue_nothing(
    app: App, dsn: str, conn: psycopg.Connection[Any], bad: Any
) -> None:
    task = app.task(name="json.task")(send_welcome)
    with pytest.raises(TypeError, match="JSON"):
        task.enqueue(bad)
    with pytest.raises(TypeError, match="JSON"):
        app.enqueue_many([task.job(1), task.job(bad)])
    with psycopg.connect(dsn) as caller:
        with pytest.raises(TypeError, match="JSON"):
            task.enqueue(bad, conn=caller)
        # The caller's transaction is still usable: nothing was sent.
        task.enqueue(1, conn=caller)
        caller.commit()
    assert count_jobs(conn) == 1


def test_enqueue_by_name_for_an_unregistered_task(app: App, conn: psycopg.Connection[Any]) -> None:
    job_id = app.enqueue("billing.charge", {"invoice": 17}, queue="billing", priority=3, max_attempts=2)
    row = job(conn, job_id)
    assert row is not None
    assert (row["task"], row["args"], row["queue"], row["priority"], row["max_attempts"]) == (
        "billing.charge",
        {"invoice": 17},
        "billing",
        3,
        2,
    )


def test_enqueue_by_name_of_a_registered_task_takes_its_defaults(app: App, conn: psycopg.Connection[Any]) -> None:
    app.task(name="reg.task", queue="mail", priority=4, max_attempts=9)(send_welcome)
    row = job(conn, app.enqueue("reg.task", {"user_id": 1}))
    assert row is not None
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("mail", 4, 9)


def test_a_refused_job_raises_invalid_job_naming_the_constraint(
    app: App, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    task = app.task(name="bad.queue")(send_welcome)
    with pytest.raises(InvalidJob) as refused:
        task.using(queue="no spaces allowed").enqueue(1)
    assert refused.value.constraint == "jobs_queue_valid"
    with pytest.raises(InvalidJob):
        app.enqueue_many([task.job(1), JobSpec(task="bad.queue", args={}, queue="no spaces")])
    with pytest.raises(ValueError, match="priority"):
        app.enqueue_many([task.job(1), JobSpec(task="bad.queue", args={}, priority=10**9)])
    with psycopg.connect(dsn) as caller:
        with pytest.raises(ValueError, match="max_attempts"):
            task.using(max_attempts=0).enqueue(1, conn=caller)
        caller.rollback()
    assert count_jobs(conn) == 0


def test_enqueue_reconnects_after_the_apps_connection_drops(app: App, conn: psycopg.Connection[Any]) -> None:
    task = app.task(name="reconnect.task")(send_welcome)
    task.enqueue(1)
    others = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND backend_type = 'client backend'"
    ).fetchall()
    assert len(others) == 1  # the app's own connection
    conn.execute("SELECT pg_terminate_backend(%s, 5000)", [others[0]["pid"]])  # waits until it is gone
    task.enqueue(2)
    assert count_jobs(conn) == 2


def test_enqueue_many_gives_each_job_its_own_options_and_the_defaults_to_the_rest(
    app: App, conn: psycopg.Connection[Any]
) -> None:
    task = app.task(name="many.opts")(send_welcome)
    plain = app.enqueue_many([JobSpec(task="many.opts", args={"user_id": i}) for i in range(3)])
    mixed = app.enqueue_many(
        [
            task.job(0),
            task.using(queue="urgent", priority=-7, delay=timedelta(hours=1), max_attempts=3).job(1),
            JobSpec(task="many.opts", args={"user_id": 2}, tenant="acme", idempotency_key="k-2"),
            JobSpec(task="many.opts", args={"user_id": 3}, queue="default", priority=0),
        ]
    )
    rows = {r["id"]: r for r in conn.execute("SELECT *, run_at <= now() AS due FROM pgsched.jobs").fetchall()}
    for job_id in plain:
        row = rows[job_id]
        assert (row["queue"], row["priority"], row["due"], row["tenant"], row["idempotency_key"]) == (
            "default",
            0,
            True,
            None,
            None,
        )
    first, delayed, keyed, explicit = (rows[i] for i in mixed)
    assert (first["queue"], first["priority"], first["state"]) == ("default", 0, "available")
    assert (delayed["queue"], delayed["priority"], delayed["state"], delayed["max_attempts"]) == (
        "urgent",
        -7,
        "scheduled",
        3,
    )
    assert (keyed["tenant"], keyed["idempotency_key"], keyed["state"]) == ("acme", "k-2", "available")
    assert (explicit["queue"], explicit["priority"], explicit["state"]) == ("default", 0, "available")


def test_enqueue_many_names_the_task_whose_args_json_cannot_carry_and_writes_none(
    app: App, conn: psycopg.Connection[Any]
) -> None:
    app.task(name="many.json")(send_welcome)
    good = JobSpec(task="many.json", args={"user_id": 1})
    for bad in ({"user_id": {1, 2}}, {"user_id": math.nan}):
        with pytest.raises(TypeError, match=r"many\.json.*JSON-serializable"):
            app.enqueue_many([good, JobSpec(task="many.json", args=bad)])
    assert count_jobs(conn) == 0
