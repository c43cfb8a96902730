"""pgsched.contrib.django against the real Django and django-tasks: a settings module whose database is the test
PostgreSQL, tasks defined with ``@task``, enqueue inside ``transaction.atomic()``, workers that run them, results."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import django
import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched.runtime.worker import Worker, WorkerOptions
from pgsched.testing import clean
from tests.conftest import drop_database, new_database
from tests.integration.conftest import Running, wait_for

ROOT = Path(__file__).resolve().parents[2]
Conn = psycopg.Connection[dict[str, Any]]


@pytest.fixture(scope="module")
def django_dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    """Django set up with tests/django_project/settings.py, on a pgsched database of this module."""
    name, dsn = new_database(admin_dsn, template_db)
    os.environ["PGSCHED_DJANGO_DSN"] = dsn
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.django_project.settings"
    django.setup()
    try:
        yield dsn
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(admin_dsn, name)


@pytest.fixture
def db(django_dsn: str) -> Iterator[Conn]:
    """A connection of the test's own (not Django's), on a pgsched emptied before the test."""
    with psycopg.connect(django_dsn, autocommit=True) as plain:
        clean(plain)
    with psycopg.connect(django_dsn, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
def worker(db: Conn) -> Iterator[Running]:
    """A pgsched worker for the Django project's tasks, as `pgsched worker --app pgsched.contrib.django:app` runs."""
    from pgsched.contrib.django import get_app

    running = Running(
        Worker(
            get_app(),
            WorkerOptions(queues=["default", "emails"], install_signal_handlers=False, poll_interval=0.2),
        )
    ).start()
    yield running
    running.stop()


def jobs(db: Conn) -> list[dict[str, Any]]:
    return db.execute("SELECT id, task, queue, args, priority, state::text FROM pgsched.jobs ORDER BY id").fetchall()


def finished(result: Any, timeout: float = 30.0) -> Any:
    from django_tasks import default_task_backend

    def check() -> Any:
        found = default_task_backend.get_result(result.id)
        return found if found.is_finished else None

    return wait_for(check, timeout, what=f"task result {result.id} finished")


def test_enqueue_in_atomic_rolls_back_with_it_and_commits_with_it(db: Conn, worker: Running) -> None:
    from django.db import transaction
    from django_tasks import TaskResultStatus, default_task_backend

    from tests.django_project.tasks import add

    class Rollback(Exception):
        pass

    raised = False
    try:
        with transaction.atomic():
            gone = add.enqueue(2, 3)
            # In Django's transaction: visible on its connection, not on another.
            assert default_task_backend.get_result(gone.id).status == TaskResultStatus.READY
            assert jobs(db) == []
            raise Rollback  # the request fails after the enqueue
    except Rollback:
        raised = True
    assert raised
    assert jobs(db) == []
    from django_tasks.exceptions import TaskResultDoesNotExist

    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(gone.id)

    with transaction.atomic():
        kept = add.enqueue(2, 3)
        assert jobs(db) == []  # not before the commit
    done = finished(kept)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert (done.args, done.kwargs, done.attempts, done.errors) == ([2, 3], {}, 1, [])
    assert done.enqueued_at is not None
    assert done.started_at is not None
    assert done.finished_at is not None
    assert done.worker_ids == [worker.worker.name]
    kept.refresh()  # the framework's own refresh reads the same result
    assert kept.status == TaskResultStatus.SUCCESSFUL
    assert kept.return_value == 5
    assert add.get_result(kept.id).return_value == 5


def test_queue_priority_kwargs_and_the_orm_on_the_worker(db: Conn, django_dsn: str) -> None:
    from django_tasks import TaskResultStatus

    from tests.django_project.tasks import send_welcome

    result = send_welcome.enqueue(42, template="promo")  # outside atomic: autocommit, at once
    (row,) = jobs(db)
    assert row == {
        "id": int(result.id),
        "task": "tests.django_project.tasks.send_welcome",
        "queue": "emails",
        "args": {"args": [42], "kwargs": {"template": "promo"}},
        "priority": 10,
        "state": "available",
    }
    # The worker the way a deployment runs it: the CLI, the Django settings module, --burst.
    env = {
        **os.environ,
        "PGSCHED_DSN": django_dsn,
        "DJANGO_SETTINGS_MODULE": "tests.django_project.settings",
        "PYTHONPATH": str(ROOT),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pgsched",
            "worker",
            "--app",
            "pgsched.contrib.django:app",
            "--queues",
            "emails",
            "--burst",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    done = finished(result)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {
        "user": 42,
        "template": "promo",
        "database": psycopg.conninfo.conninfo_to_dict(django_dsn)["dbname"],
    }


def test_a_failure_is_a_failed_result_with_its_exception(db: Conn, worker: Running) -> None:
    from django_tasks import TaskResultStatus

    from tests.django_project.tasks import PaymentDeclined, charge

    done = finished(charge.enqueue(300))
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 1  # Django tasks do not retry (MAX_ATTEMPTS defaults to 1)
    (error,) = done.errors
    assert error.exception_class is PaymentDeclined
    assert "card declined for 300" in error.traceback
    assert "Traceback" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = done.return_value


def test_context_async_tasks_and_run_after(db: Conn, worker: Running) -> None:
    from django.utils import timezone
    from django_tasks import TaskResultStatus

    from tests.django_project.tasks import async_double, which_attempt

    with_context = which_attempt.enqueue("t1")
    coroutine = async_double.enqueue(21)
    later = which_attempt.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("later")
    assert finished(with_context).return_value == {"attempt": 1, "id": with_context.id, "tag": "t1"}
    assert finished(coroutine).return_value == 42
    row = db.execute("SELECT state::text, run_at FROM pgsched.jobs WHERE id = %s", [int(later.id)]).fetchone()
    assert row is not None
    assert row["state"] == "scheduled"
    assert row["run_at"] > timezone.now() + timedelta(minutes=59)
    assert which_attempt.get_result(later.id).status == TaskResultStatus.READY


def test_aenqueue_from_async_code(db: Conn, worker: Running) -> None:
    import asyncio

    from tests.django_project.tasks import add

    async def view() -> Any:
        return await add.aenqueue(20, 22)

    assert finished(asyncio.run(view())).return_value == 42


def test_retries_with_max_attempts_then_failed(db: Conn) -> None:
    from django_tasks import TaskResultStatus, task_backends

    from pgsched.contrib.django import get_app
    from tests.django_project.tasks import flaky

    result = flaky.enqueue("x")
    running = Running(
        Worker(get_app("retrying"), WorkerOptions(queues=["retries"], install_signal_handlers=False, poll_interval=0.2))
    ).start()
    try:
        backend = task_backends["retrying"]
        done = wait_for(lambda: (r := backend.get_result(result.id)).is_finished and r, 60, what="flaky finished")
    finally:
        running.stop()
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 2
    assert done.errors[0].exception_class is RuntimeError


def test_bad_configuration_and_ids_are_refused_clearly(db: Conn) -> None:
    from django_tasks import default_task_backend
    from django_tasks.exceptions import TaskResultDoesNotExist

    from pgsched.contrib.django import PgschedBackend
    from pgsched.errors import ConfigurationError

    with pytest.raises(TaskResultDoesNotExist, match="not a pgsched job id"):
        default_task_backend.get_result("abc")
    with pytest.raises(TaskResultDoesNotExist, match="not visible"):
        default_task_backend.get_result("987654321")
    with pytest.raises(ConfigurationError, match="unknown option"):
        PgschedBackend("x", {"OPTIONS": {"DATABSE": "default"}})
    with pytest.raises(ConfigurationError, match="MAX_ATTEMPTS"):
        PgschedBackend("y", {"OPTIONS": {"MAX_ATTEMPTS": 0}})
