"""App.enqueue_many is all or nothing on every path, and enqueue options mean what they say (None is the default)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgsched import App, IdempotencyConflict, InvalidJob, JobSpec
from pgsched.errors import from_psycopg
from tests.integration.conftest import job

Conn = psycopg.Connection[Any]


def handler(n: int) -> None:
    """Registered by the tests below."""


def count(conn: Conn, table: str = "jobs") -> int:
    row = conn.execute(f"SELECT count(*) AS n FROM pgsched.{table}").fetchone()
    assert row is not None
    return int(row["n"])


def mixed(n: int, *, bad_at: int | None = None) -> list[JobSpec]:
    """n jobs over every path at once: labels, keys, delays, tenants (row bad_at, 0-based, has a bad queue)."""
    return [
        JobSpec(
            task="batch.task",
            args={"n": i},
            queue="not ok" if i == bad_at else "q",
            labels=("gpu", f"zone-{i % 3}") if i % 2 else (),
            idempotency_key=f"key-{i}" if i % 3 == 0 else None,
            delay=timedelta(minutes=1) if i % 5 == 0 else None,
            tenant="acme" if i % 4 == 0 else None,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("labels", [True, False])
def test_a_bad_row_at_position_501_of_1000_commits_nothing(app: App, conn: Conn, labels: bool) -> None:
    specs = mixed(1000, bad_at=500)
    if not labels:
        specs = [JobSpec(task=s.task, args=s.args, queue=s.queue, idempotency_key=s.idempotency_key) for s in specs]
    with pytest.raises(InvalidJob) as refused:
        app.enqueue_many(specs)
    assert "row 501 of the batch: queue 'not ok'" in str(refused.value)
    assert (refused.value.constraint, refused.value.column) == ("jobs_queue_valid", "queue")
    assert count(conn) == 0
    assert count(conn, "idempotency_keys") == 0
    # The caller's retry, fixed, enqueues each job once.
    ids = app.enqueue_many(mixed(1000))
    assert len(set(ids)) == 1000
    assert count(conn) == 1000


def test_a_batch_with_labels_is_one_statement_in_one_transaction(app: App, conn: Conn) -> None:
    specs = mixed(300)
    ids = app.enqueue_many(specs)
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM pgsched.jobs").fetchall()}
    assert len({r["created_at"] for r in rows.values()}) == 1  # one transaction: one now()
    for spec, job_id in zip(specs, ids, strict=True):
        row = rows[job_id]
        assert (row["args"], row["labels"], row["tenant"]) == (spec.args, list(spec.labels), spec.tenant)
        assert row["state"] == ("scheduled" if spec.delay else "available")
        assert row["idempotency_key"] == spec.idempotency_key
    assert ids == sorted(ids)


def test_the_callers_transaction_rolled_back_loses_the_whole_batch(app: App, dsn: str, conn: Conn) -> None:
    with psycopg.connect(dsn) as caller:
        ids = app.enqueue_many(mixed(1000), conn=caller)
        assert len(ids) == 1000
        caller.rollback()
    assert count(conn) == 0
    assert count(conn, "idempotency_keys") == 0
    with psycopg.connect(dsn) as caller:
        app.enqueue_many(mixed(1000), conn=caller)
        assert count(conn) == 0  # not before the caller commits
        caller.commit()
    assert count(conn) == 1000


def test_a_refused_batch_in_the_callers_transaction_leaves_it_to_roll_back(app: App, dsn: str, conn: Conn) -> None:
    with psycopg.connect(dsn) as caller:
        app.enqueue_many(mixed(10), conn=caller)
        with pytest.raises(InvalidJob, match="row 7 of the batch"):
            app.enqueue_many(mixed(10, bad_at=6), conn=caller)
        caller.rollback()
    assert count(conn) == 0


def test_a_repeated_key_with_other_work_is_an_idempotency_conflict(app: App, conn: Conn) -> None:
    task = app.task(name="keyed.task")(handler)
    first = task.using(idempotency_key="order-1").enqueue(1)
    assert task.using(idempotency_key="order-1", priority=9).enqueue(1) == first
    with pytest.raises(IdempotencyConflict) as conflict:
        task.using(idempotency_key="order-1").enqueue(2)
    assert conflict.value.code == "PS422"
    assert f"held by job {first}" in str(conflict.value)
    with pytest.raises(IdempotencyConflict, match="row 2 of the batch"):
        app.enqueue_many([task.job(5), task.using(idempotency_key="order-1").job(3)])
    assert count(conn) == 1


# -- options: only None means the default -------------------------------------


def test_max_attempts_zero_is_refused_not_the_default(app: App, conn: Conn) -> None:
    task = app.task(name="attempts.task", max_attempts=7)(handler)
    for call in (
        lambda: app.enqueue("attempts.task", {"n": 1}, max_attempts=0),
        lambda: app.enqueue(task, {"n": 1}, max_attempts=-1),
        lambda: task.using(max_attempts=0).enqueue(1),
        lambda: app.enqueue_many([JobSpec(task="attempts.task", max_attempts=0)]),
    ):
        with pytest.raises(ValueError, match=r"max_attempts .* at least 1"):
            call()
    assert count(conn) == 0


def test_zero_and_empty_options_are_values_not_defaults(app: App, conn: Conn) -> None:
    task = app.task(name="opts.zero", queue="mail", priority=4, labels=["gpu"], max_attempts=7)(handler)
    row = job(conn, app.enqueue(task, {"n": 1}, priority=0, delay=timedelta(0), labels=[]))
    assert row is not None
    assert (row["priority"], row["state"], row["labels"], row["queue"], row["max_attempts"]) == (
        0,
        "available",
        [],
        "mail",
        7,
    )
    row = job(conn, task.using(priority=0, labels=()).enqueue(2))
    assert row is not None
    assert (row["priority"], row["labels"]) == (0, [])
    with pytest.raises(InvalidJob, match="queue ''"):
        app.enqueue(task, {"n": 3}, queue="")  # refused, not the task's queue
    assert count(conn) == 2


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"priority": 99999999999}, ValueError, r"priority .* between -1000000 and 1000000"),
        ({"priority": True}, TypeError, "priority"),
        ({"max_attempts": 2.5}, TypeError, "max_attempts"),
        ({"labels": "gpu"}, ValueError, "labels"),
        ({"labels": ["gpu", ""]}, ValueError, "labels"),
        ({"delay": 5}, TypeError, "delay"),
    ],
)
def test_bad_options_are_refused_before_the_database(
    app: App, conn: Conn, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        app.enqueue("opts.bad", {}, **options)
    assert count(conn) == 0


def test_errors_postgresql_raises_name_the_rule_not_the_partition(app: App, conn: Conn) -> None:
    job_id = app.enqueue("plain.task", {})
    with pytest.raises(psycopg.errors.CheckViolation) as raw:  # the owner, writing past the functions
        conn.execute("UPDATE pgsched.jobs SET state = 'running' WHERE id = %s", [job_id])
    assert re.search(r"jobs_s\d", str(raw.value))  # what PostgreSQL says: the partition
    mapped = from_psycopg(raw.value)
    assert isinstance(mapped, InvalidJob)
    assert str(mapped) == (
        "pgsched: job refused by jobs_state_valid: a job is scheduled, available, or running with a lease"
    )
    assert not re.search(r"jobs_s\d", str(mapped))


def test_timeouts_and_concurrency_keys_go_in_with_the_batch(app: App, conn: Conn) -> None:
    task = app.task(name="batch.limited")(handler)
    specs = [
        task.using(timeout=30, concurrency_key="customer:42").job(1),
        task.job(2),
        task.using(timeout=timedelta(minutes=2)).job(3),
        task.using(concurrency_key="customer:7", idempotency_key="once").job(4),
    ]
    ids = app.enqueue_many(specs)
    got = [(job(conn, int(i))["timeout"], job(conn, int(i))["concurrency_key"]) for i in ids]
    assert got == [
        (timedelta(seconds=30), "customer:42"),
        (None, None),
        (timedelta(minutes=2), None),
        (None, "customer:7"),
    ]


def test_a_bad_concurrency_key_in_a_batch_names_its_row_and_commits_nothing(app: App, conn: Conn) -> None:
    task = app.task(name="batch.limited")(handler)
    with pytest.raises(InvalidJob) as refused:
        app.enqueue_many([task.job(1), task.job(2), task.using(concurrency_key="").job(3)])
    assert "row 3 of the batch: concurrency_key ''" in str(refused.value)
    assert (refused.value.constraint, refused.value.column) == ("jobs_concurrency_key_length", "concurrency_key")
    assert count(conn) == 0
