"""A Django tasks backend: ``@task`` functions run on pgsched workers; enqueue joins Django's transaction.

Serves Django's built-in ``django.tasks`` (Django 6.0+) and, on older Django,
the ``django-tasks`` backport (``pip install 'pgsched[django]'`` brings it)::

    TASKS = {
        "default": {
            "BACKEND": "pgsched.contrib.django.PgschedBackend",
            "QUEUES": ["default", "emails"],
            # DATABASE: the Django database whose connection enqueue uses (default "default");
            # None: pgsched's own (PGSCHED_DSN or DSN), committing at once.
            # MAX_ATTEMPTS: runs before a result is FAILED (default 1, as Django tasks do not retry).
            "OPTIONS": {"DATABASE": "default"},
        }
    }

Workers: ``DJANGO_SETTINGS_MODULE=mysite.settings pgsched worker --app pgsched.contrib.django:app
--queues default,emails`` (the ``tasks`` modules of INSTALLED_APPS are imported at start).

A job's pgsched task name is the function's module path and its args are
``{"args": [...], "kwargs": {...}}``; ``get_result(id)`` reads the job, then
its history row: READY while waiting, RUNNING, SUCCESSFUL with the return
value, FAILED (dead or cancelled) with the recorded error.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.conninfo import make_conninfo

from pgsched.api.app import App
from pgsched.core.job import JobContext
from pgsched.core.task import JobSpec
from pgsched.db import queries
from pgsched.errors import ConfigurationError

if TYPE_CHECKING:
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        import django.tasks  # noqa: F401  (Django 6.0+: the framework is built in)
    except ImportError:  # older Django: the django-tasks backport
        from django_tasks import task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
    else:
        from django.tasks import Task, TaskContext, TaskError, TaskResult, TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started

from django.db import close_old_connections, connections
from django.utils import timezone
from django.utils.module_loading import import_string

T = TypeVar("T")

# pgsched state -> the Django status a TaskResult shows
_STATUS = {
    "scheduled": "READY",
    "waiting": "READY",
    "available": "READY",
    "running": "RUNNING",
    "completed": "SUCCESSFUL",
    "dead": "FAILED",
    "cancelled": "FAILED",
}
# What Django's connection parameters hold that is not a libpq keyword.
_NOT_LIBPQ = frozenset({"context", "cursor_factory", "prepare_threshold", "client_encoding"})

_apps: dict[str, App] = {}
_apps_lock = threading.Lock()


class PgschedBackend(BaseTaskBackend):
    """Runs Django tasks on pgsched: one job per enqueue, written on the Django connection's transaction."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options: Mapping[str, Any] = self.options
        unknown = set(options) - {"DATABASE", "DSN", "MAX_ATTEMPTS"}
        if unknown:
            raise ConfigurationError(f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(sorted(unknown))}")
        self.database: str | None = options.get("DATABASE", "default")
        # Django tasks do not retry: a raised exception makes the result FAILED. MAX_ATTEMPTS > 1
        # lets pgsched retry with backoff first (the result shows READY, with the error, meanwhile).
        self.max_attempts = int(options.get("MAX_ATTEMPTS", 1))
        if self.max_attempts < 1:
            raise ConfigurationError(f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS'] must be at least 1")
        self.app = _app(alias, options.get("DSN"), self.database)

    # -- producing --------------------------------------------------------

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        # Every task defined for this backend becomes a pgsched task of the same name, so a
        # worker that imported the module can run it.
        name = task.module_path
        with _apps_lock:  # tasks are defined on any thread (each has its backend instance)
            if name not in self.app.tasks:
                handler = _handler(task, self.alias)
                self.app.task(name=name, queue=task.queue_name, max_attempts=self.max_attempts)(handler)

    def enqueue(self, task: Task[Any, T], args: Sequence[Any], kwargs: Mapping[str, Any]) -> TaskResult[T]:
        """Write the job on the Django connection: inside ``transaction.atomic()`` it commits or rolls back with it."""
        self.validate_task(task)
        spec = JobSpec(
            task=task.module_path,
            args={"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))},
            queue=task.queue_name,
            priority=task.priority,
            run_at=task.run_after,
            max_attempts=self.max_attempts,
        )
        job_id = self.app.enqueue_spec(spec, conn=self._connection())
        result: TaskResult[T] = TaskResult(
            task=task,
            id=str(int(job_id)),
            status=_status("READY"),
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ----------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The job's result as pgsched has it now (its active row, else its history); TaskResultDoesNotExist."""
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(f"{result_id!r} is not a pgsched job id") from None
        rows = self.app._run(self._connection(), queries.TASK_RESULT, (job_id,))
        if not rows:
            raise TaskResultDoesNotExist(f"job {job_id} is not visible: not committed, rolled back, or pruned")
        state, name, args_text, attempt, worker, created_at, started_at, finished_at, value, error = rows[0]
        args = json.loads(args_text)
        task = _task(name, job_id)
        status = _status(_STATUS[state])
        errors = [_error(error)] if error and status != _status("SUCCESSFUL") else []
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=str(job_id),
            status=status,
            enqueued_at=created_at,
            started_at=started_at,
            last_attempted_at=started_at,
            finished_at=finished_at,
            args=list(args.get("args", [])),
            kwargs=dict(args.get("kwargs", {})),
            backend=self.alias,
            errors=errors,
            # pgsched records the worker of the latest attempt: one entry per attempt
            worker_ids=[worker or ""] * attempt,
        )
        if status == _status("SUCCESSFUL"):
            object.__setattr__(result, "_return_value", None if value is None else json.loads(value))
        return result

    # -- the connection ---------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any] | None:
        """The psycopg 3 connection of Django's database (None: pgsched's own, committing at once)."""
        if self.database is None:
            return None
        wrapper = connections[self.database]
        if wrapper.vendor != "postgresql":
            raise ConfigurationError(
                f"TASKS[{self.alias!r}]: database {self.database!r} is {wrapper.vendor}, not PostgreSQL;"
                " point OPTIONS['DATABASE'] at the pgsched database, or set it to None (enqueue then commits at once)"
            )
        wrapper.ensure_connection()
        raw = wrapper.connection
        if not isinstance(raw, psycopg.Connection):
            raise ConfigurationError(
                f"TASKS[{self.alias!r}]: database {self.database!r} is connected with {type(raw).__module__};"
                " pgsched joins Django's transaction through psycopg 3 (pip install 'psycopg[binary]')"
            )
        return raw


def get_app(alias: str = "default") -> App:
    """The App that runs the tasks of backend ``alias``, with every ``tasks`` module of INSTALLED_APPS imported."""
    import django
    from django.apps import apps
    from django.utils.module_loading import autodiscover_modules

    if not apps.ready:
        django.setup()
    autodiscover_modules("tasks")
    backend = task_backends[alias]
    if not isinstance(backend, PgschedBackend):
        raise ConfigurationError(f"TASKS[{alias!r}] is {type(backend).__name__}, not {__name__}.PgschedBackend")
    return backend.app


def __getattr__(name: str) -> Any:
    # ``pgsched worker --app pgsched.contrib.django:app``: made when first asked for, after
    # Django is set up (DJANGO_SETTINGS_MODULE), never at import.
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _app(alias: str, dsn: str | None, database: str | None) -> App:
    """One App per backend alias, for the process (its tasks are registered as task modules are imported)."""
    with _apps_lock:
        found = _apps.get(alias)
        if found is None:
            found = _apps[alias] = App(dsn or (_django_dsn(database) if database else None), name=f"django:{alias}")
        return found


def _django_dsn(database: str) -> str:
    """Django's connection settings for ``database`` as a libpq DSN (workers use them for their own connections)."""
    params = connections[database].get_connection_params()
    return make_conninfo(
        "", **{k: v for k, v in params.items() if k not in _NOT_LIBPQ and isinstance(v, str | int) and v != ""}
    )


def normalize_json(value: Any) -> Any:
    """What JSON gives back for value (tuples become lists...), as the framework stores arguments and results."""
    return json.loads(json.dumps(value))


def get_module_path(value: Any) -> str:
    return f"{value.__module__}.{value.__qualname__}"


def _status(name: str) -> TaskResultStatus:
    return TaskResultStatus(name)


def _task(name: str, job_id: int) -> Task[Any, Any]:
    try:
        found = import_string(name)
    except ImportError:
        raise TaskResultDoesNotExist(f"job {job_id} runs {name!r}, which is no importable Django task") from None
    if not isinstance(found, Task):
        raise TaskResultDoesNotExist(f"job {job_id} runs {name!r}, which is not a Django task")
    return found


def _error(text: str) -> TaskError:
    """A TaskError from the traceback pgsched recorded: its last line names the exception's class."""
    lines = text.strip().splitlines()
    head = lines[-1].split(":", 1)[0].strip() if lines else ""
    if head.startswith("gave up") or head.startswith("cancelled") or not head.replace(".", "").isidentifier():
        path = "pgsched.errors.JobFailed"
    else:
        path = head if "." in head else f"builtins.{head}"
    return TaskError(exception_class_path=path, traceback=text)


def _handler(task: Task[Any, Any], alias: str) -> Callable[..., Any]:
    """The pgsched handler of a Django task: calls it with the stored args, in a fresh Django DB session."""

    def run(args: list[Any], kwargs: dict[str, Any], job: JobContext) -> Any:
        now = timezone.now()
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=str(job.id),
            status=_status("RUNNING"),
            enqueued_at=None,
            started_at=now,
            last_attempted_at=now,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=alias,
            errors=[],
            worker_ids=[job.worker] * job.attempt,
        )
        close_old_connections()
        task_started.send(sender=PgschedBackend, task_result=result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            object.__setattr__(result, "status", _status("SUCCESSFUL"))
            object.__setattr__(result, "_return_value", normalize_json(value))
            return result._return_value
        except BaseException as exc:
            object.__setattr__(result, "status", _status("FAILED"))
            result.errors.append(TaskError(exception_class_path=get_module_path(type(exc)), traceback=str(exc)))
            raise
        finally:
            object.__setattr__(result, "finished_at", timezone.now())
            task_finished.send(sender=PgschedBackend, task_result=result)
            close_old_connections()

    return run


__all__ = ["PgschedBackend", "get_app"]
