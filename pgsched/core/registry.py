"""Registration: the tasks, services and schedules an application defines in code, before any database."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar, overload

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from pgsched.core.handle import JobHandle
from pgsched.core.limits import TASK_NAME
from pgsched.core.policies import ConcurrencyPolicy, GapPolicy, MisfirePolicy, OverlapPolicy, values
from pgsched.core.task import JobSpec, Task, check_max_attempts, check_resource_limits
from pgsched.db import queries
from pgsched.db.translate import translated
from pgsched.errors import TaskAlreadyRegistered, TaskNotRegistered

P = ParamSpec("P")
# App.cron()'s policy parameters and the enum each one's value must belong to.
_SCHEDULE_POLICIES: dict[str, type[StrEnum]] = {
    "gap": GapPolicy,
    "overlap": OverlapPolicy,
    "misfire": MisfirePolicy,
    "concurrency": ConcurrencyPolicy,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """A recurring schedule defined in code with App.cron(); synced into pgsched.schedules at worker start."""

    name: str
    cron: str
    task: str
    args: dict[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None
    gap: str = GapPolicy.RUN.value
    overlap: str = OverlapPolicy.ONCE.value
    misfire: str = MisfirePolicy.LATEST.value
    misfire_cap: int = 100
    misfire_grace: timedelta = timedelta(minutes=1)
    concurrency: str = ConcurrencyPolicy.SKIP.value
    horizon: timedelta = timedelta(hours=1)
    enabled: bool = True


R = TypeVar("R")


def _default_task_name(func: Callable[..., Any]) -> str:
    """``module.function``; a function defined inside another keeps its outer names, not ``<locals>``."""
    return f"{func.__module__}.{func.__qualname__.replace('<locals>.', '')}"


def schedule_params(spec: ScheduleSpec) -> tuple[Any, ...]:
    """pgsched.upsert_schedule's parameters for a schedule defined in code."""
    return (
        spec.name,
        spec.cron,
        spec.task,
        Jsonb(spec.args),
        spec.timezone,
        spec.queue,
        spec.priority,
        spec.max_attempts,
        spec.gap,
        spec.overlap,
        spec.misfire,
        spec.misfire_cap,
        spec.misfire_grace,
        spec.concurrency,
        spec.enabled,
        spec.horizon,
    )


def sync_schedules(conn: psycopg.Connection[Any], schedules: Iterable[ScheduleSpec]) -> int:
    """Write the schedules defined in code into pgsched.schedules on ``conn``; returns how many."""
    count = 0
    with translated():
        for spec in schedules:
            with conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(queries.UPSERT_SCHEDULE, schedule_params(spec)).fetchall()
            count += 1
    return count


class Registry(ABC):
    """The tasks and schedules of one application; the App adds the database (DSN, connections, enqueue).

    The runtime (workers, drain, command runners) takes a Registry: what it runs, and where.
    """

    def __init__(self) -> None:
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, ScheduleSpec] = {}

    # -- the database, which the App provides ------------------------------

    @property
    @abstractmethod
    def dsn(self) -> str: ...

    @abstractmethod
    def configure(self, dsn: str) -> None: ...

    @abstractmethod
    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]: ...

    @abstractmethod
    def enqueue_spec(self, spec: JobSpec, *, conn: psycopg.Connection[Any] | None = None) -> JobHandle: ...

    @abstractmethod
    async def enqueue_spec_async(
        self, spec: JobSpec, *, conn: psycopg.AsyncConnection[Any] | None = None
    ) -> JobHandle: ...

    # -- registration ----------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int | None = None,
        priority: int = 0,
        retry_backoff: float | None = None,
        retry_backoff_max: float | None = None,
        retry_jitter: float | None = None,
        labels: Sequence[str] = (),
        timeout: float | None = None,
        key_scope: str | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int | None = None,
        priority: int = 0,
        retry_backoff: float | None = None,
        retry_backoff_max: float | None = None,
        retry_jitter: float | None = None,
        labels: Sequence[str] = (),
        timeout: float | None = None,
        key_scope: str | None = None,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a handler. ``name`` (what plain SQL enqueues by) defaults to ``module.function``.

        retry_backoff / retry_backoff_max are seconds (exponential from the
        first, capped at the second); retry_jitter is the fraction removed at
        random. Unset values fall back to the queue's, then the install's.
        key_scope: how long an idempotency key of its jobs is held, 'active'
        (while the job is) or 'retention' (also the retention after it ended,
        the default); a job's own key_scope wins.
        """

        def register(func: Callable[P, R]) -> Task[P, R]:
            task_name = name or _default_task_name(func)
            if not TASK_NAME.fullmatch(task_name):
                raise ValueError(f"{task_name!r} is not a valid task name (letters, digits, _ . : -); pass name=...")
            if task_name in self.tasks and self.tasks[task_name].fn is not func:
                raise TaskAlreadyRegistered(f"a task named {task_name!r} is already registered")
            check_max_attempts(max_attempts, f"max_attempts of task {task_name!r}")
            created = Task(
                self,
                func,
                name=task_name,
                queue=queue,
                max_attempts=max_attempts,
                priority=priority,
                retry_backoff=retry_backoff,
                retry_backoff_max=retry_backoff_max,
                retry_jitter=retry_jitter,
                labels=labels,
                timeout=timeout,
                key_scope=key_scope,
            )
            self.tasks[task_name] = created
            return created

        if fn is not None:
            return register(fn)
        return register

    def service(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int | None = None,
        priority: int = 0,
        retry_backoff: float | None = None,
        retry_backoff_max: float | None = None,
        retry_jitter: float | None = None,
        labels: Sequence[str] = (),
        memory_limit: int | None = None,
        cpu_limit: float | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a service: a handler that runs until its job is cancelled (docs/services.md).

        Its jobs (``.enqueue(...)``, always through pgsched.enqueue_service)
        have no timeout and are started again on another worker within a
        lease when their worker dies; lease expiries never send them dead.
        With an idempotency key, one job per key is alive at a time: enqueue
        again and you get the running one. The handler should loop until
        ``ctx.should_stop`` (take a JobContext parameter); a run that raises
        is retried by the policy like any task, one that returns ends the
        job completed. ``memory_limit`` (MiB) and ``cpu_limit`` (CPUs) are its
        jobs' resource limits (None: config.service_memory_limit / cpu_limit,
        0: none); enforced in ``--pool process`` workers.
        """
        check_resource_limits(memory_limit, cpu_limit, "a service")

        def register(func: Callable[P, R]) -> Task[P, R]:
            created = self.task(
                name=name,
                queue=queue,
                max_attempts=max_attempts,
                priority=priority,
                retry_backoff=retry_backoff,
                retry_backoff_max=retry_backoff_max,
                retry_jitter=retry_jitter,
                labels=labels,
            )(func)
            created.service = True
            created.memory_limit, created.cpu_limit = memory_limit, cpu_limit
            return created

        return register

    def cron(
        self,
        expr: str,
        *,
        tz: str = "UTC",
        name: str | None = None,
        args: dict[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        gap: str = GapPolicy.RUN.value,
        overlap: str = OverlapPolicy.ONCE.value,
        misfire: str = MisfirePolicy.LATEST.value,
        misfire_cap: int = 100,
        misfire_grace: timedelta = timedelta(minutes=1),
        concurrency: str = ConcurrencyPolicy.SKIP.value,
        horizon: timedelta = timedelta(hours=1),
    ) -> Callable[[Any], Any]:
        """Run a task on a cron schedule in an IANA time zone (synced to pgsched.schedules at worker start).

        Decorates a function (registering it as a task) or a Task. Policies:
        gap 'run'|'skip' (a local time that does not exist), overlap
        'once'|'twice' (a fixed local time that happens twice), misfire
        'skip'|'latest'|'all' (occurrences missed while nothing ran),
        concurrency 'allow'|'skip'|'queue'|'replace' (previous run still going).
        """
        from pgsched.core import cron as cronlib

        cronlib.validate(expr, tz)
        chosen = {"gap": gap, "overlap": overlap, "misfire": misfire, "concurrency": concurrency}
        for key, value in chosen.items():
            if value not in values(_SCHEDULE_POLICIES[key]):
                raise ValueError(
                    f"{key} policy must be one of {', '.join(values(_SCHEDULE_POLICIES[key]))}, not {value!r}"
                )

        def register(target: Any) -> Any:
            task = target if isinstance(target, Task) else self.task(target)
            spec = ScheduleSpec(
                name=name or task.name,
                cron=expr,
                task=task.name,
                args=dict(args or {}),
                timezone=tz,
                queue=queue or task.queue,
                priority=task.priority if priority is None else priority,
                max_attempts=task.max_attempts,
                gap=gap,
                overlap=overlap,
                misfire=misfire,
                misfire_cap=misfire_cap,
                misfire_grace=misfire_grace,
                concurrency=concurrency,
                horizon=horizon,
            )
            if spec.name in self.schedules and self.schedules[spec.name] != spec:
                raise ValueError(f"a schedule named {spec.name!r} is already defined")
            self.schedules[spec.name] = spec
            return task

        return register

    def get_task(self, name: str) -> Task[Any, Any]:
        """The task registered under name; raises TaskNotRegistered."""
        try:
            return self.tasks[name]
        except KeyError:
            raise TaskNotRegistered(f"no task is registered under {name!r}") from None
