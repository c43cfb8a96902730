"""Tasks: registered handlers, how their arguments become a job's JSON args, and enqueueing them."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from pgsched.core.handle import JobHandle
from pgsched.core.job import JobContext, to_json
from pgsched.core.limits import (
    CPU_LIMIT_MAX,
    CPU_LIMIT_MIN,
    MAX_ATTEMPTS_MIN,
    MEMORY_LIMIT_MAX,
    MEMORY_LIMIT_MIN,
    PRIORITY_MAX,
    PRIORITY_MIN,
)
from pgsched.core.policies import ConflictPolicy, DependencyPolicy, KeyScope, one_of, values

if TYPE_CHECKING:
    import psycopg

P = ParamSpec("P")
R = TypeVar("R")


# What enqueue() takes for on_conflict, key_scope and on_dependency_failure, as the enums' values.
CONFLICT_POLICIES = tuple(values(ConflictPolicy))
KEY_SCOPES = tuple(values(KeyScope))
DEPENDENCY_POLICIES = tuple(values(DependencyPolicy))


def check_max_attempts(value: Any, what: str, default: str = "None means the default") -> None:
    """max_attempts is None or an int of at least MAX_ATTEMPTS_MIN; else TypeError or ValueError. The database
    checks the upper bound (jobs_max_attempts_range)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int or None, not {value!r}")
    if value < MAX_ATTEMPTS_MIN:
        raise ValueError(f"{what} must be at least {MAX_ATTEMPTS_MIN}, not {value} ({default})")


def check_labels(value: Any, what: str) -> None:
    """Labels are a sequence of non-empty strings (a worker offers each by name); else ValueError."""
    if isinstance(value, str) or not all(isinstance(label, str) and label for label in value):
        raise ValueError(f"{what} must be a sequence of non-empty strings, not {value!r}")


def check_key_scope(value: str | None, what: str) -> None:
    """A key scope is None (the install's: retention), 'active' or 'retention'; else ValueError."""
    if value is not None and value not in KEY_SCOPES:
        raise ValueError(f"{what} must be {one_of(KeyScope)}, not {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A job to enqueue: task name, JSON args and options (None means the task's or the database's default).

    ``delay`` is added to the database's clock at enqueue; ``run_at`` wins when both are set.
    ``timeout`` (seconds, or a timedelta) limits each run of the job; None: the task's, else none.
    Only None means a default: ``priority=0`` and ``delay=timedelta(0)`` are values like any
    other, and ``max_attempts`` below 1 is refused (ValueError) instead of becoming the default.
    """

    task: str
    args: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    run_at: datetime | None = None
    delay: timedelta | None = None
    priority: int | None = None
    idempotency_key: str | None = None
    max_attempts: int | None = None
    labels: Sequence[str] = ()
    tenant: str | None = None
    timeout: float | timedelta | None = None
    service: bool = False  # a service job: runs until cancelled (pgsched.enqueue_service)
    depends_on: Sequence[int | JobSpec | Ref] = ()
    on_dependency_failure: str | None = None
    concurrency_key: str | None = None  # what the queue's per-key limits count (docs/dispatch.md)
    # A service's resource limits (docs/services.md): MiB and CPUs; None: the install default, 0: none.
    memory_limit: int | None = None
    cpu_limit: float | None = None
    on_conflict: str | None = None  # a held idempotency key: 'keep' (None) the holder, or 'replace' it (debounce)
    key_scope: str | None = None  # how long the key is held: 'retention' (None) or 'active' (while the job is)

    def __post_init__(self) -> None:
        check_resource_limits(self.memory_limit, self.cpu_limit, f"a {self.task!r} job")
        if (self.memory_limit is not None or self.cpu_limit is not None) and not self.service:
            raise ValueError(
                f"memory_limit and cpu_limit of a {self.task!r} job: only services (and commands) take resource"
                " limits; a task's handler runs inside the worker"
            )
        if self.timeout is not None:
            check_timeout(self.timeout, f"timeout of a {self.task!r} job")
        if not isinstance(self.service, bool):
            raise TypeError(f"service of a {self.task!r} job must be a bool, not {self.service!r}")
        if self.priority is not None and (isinstance(self.priority, bool) or not isinstance(self.priority, int)):
            raise TypeError(f"priority of a {self.task!r} job must be an int or None, not {self.priority!r}")
        check_max_attempts(
            self.max_attempts,
            f"max_attempts of a {self.task!r} job",
            "None means the task's, else the install's default",
        )
        if self.priority is not None and not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise ValueError(
                f"priority of a {self.task!r} job must be between {PRIORITY_MIN} and {PRIORITY_MAX},"
                f" not {self.priority}"
            )
        if self.delay is not None and not isinstance(self.delay, timedelta):
            raise TypeError(f"delay of a {self.task!r} job must be a timedelta, not {self.delay!r}")
        check_labels(self.labels, f"labels of a {self.task!r} job")
        if isinstance(self.depends_on, str | int | JobSpec | Ref) or not all(
            isinstance(d, JobSpec | Ref) or (isinstance(d, int) and not isinstance(d, bool) and d > 0)
            for d in self.depends_on
        ):
            raise ValueError(
                f"depends_on of a {self.task!r} job must be a sequence of job ids (or JobHandles), and within"
                f" enqueue_many of JobSpecs or Refs of the same batch, not {self.depends_on!r}"
            )
        if self.on_dependency_failure not in (None, *DEPENDENCY_POLICIES):
            raise ValueError(
                f"on_dependency_failure of a {self.task!r} job must be {one_of(DependencyPolicy)},"
                f" not {self.on_dependency_failure!r}"
            )
        if self.on_conflict not in (None, *CONFLICT_POLICIES):
            raise ValueError(
                f"on_conflict of a {self.task!r} job must be {one_of(ConflictPolicy)}, not {self.on_conflict!r}"
            )
        check_key_scope(self.key_scope, f"key_scope of a {self.task!r} job")

    def args_json(self) -> str:
        """The args as JSON text; raises TypeError for values JSON cannot carry."""
        try:
            return to_json(self.args)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"arguments of task {self.task!r} must be JSON-serializable: {exc}") from exc


MAX_MEMORY_LIMIT = MEMORY_LIMIT_MAX  # MiB (4 TiB); the database refuses more (_check_resource_limits)


def check_resource_limits(memory_limit: Any, cpu_limit: Any, what: str = "a job") -> None:
    """Refuse, with a clear ValueError/TypeError, the limits _check_resource_limits refuses: memory_limit in MiB
    (0: none, else 4 to 4 TiB), cpu_limit in CPUs (0: none, else 0.01 to 1024); None is the install default."""
    if memory_limit is not None:
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, int):
            raise TypeError(f"memory_limit of {what} must be MiB as an int, not {memory_limit!r}")
        if memory_limit != 0 and not MEMORY_LIMIT_MIN <= memory_limit <= MEMORY_LIMIT_MAX:
            raise ValueError(
                f"memory_limit of {what} must be 0 (no limit) or {MEMORY_LIMIT_MIN} to {MEMORY_LIMIT_MAX} MiB,"
                f" not {memory_limit}"
            )
    if cpu_limit is not None:
        if isinstance(cpu_limit, bool) or not isinstance(cpu_limit, int | float):
            raise TypeError(f"cpu_limit of {what} must be a number of CPUs, not {cpu_limit!r}")
        if cpu_limit != 0 and not CPU_LIMIT_MIN <= cpu_limit <= CPU_LIMIT_MAX:  # NaN fails both
            raise ValueError(
                f"cpu_limit of {what} must be 0 (no limit) or {CPU_LIMIT_MIN:g} to {CPU_LIMIT_MAX:g} CPUs,"
                f" not {cpu_limit!r}"
            )


@dataclass(frozen=True, slots=True)
class Ref:
    """A dependency on another job of the same ``App.enqueue_many`` batch, by its 0-based position."""

    index: int

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"Ref takes a 0-based position in the batch, not {self.index!r}")


_OPTION_NAMES = frozenset(
    {
        "queue",
        "run_at",
        "delay",
        "priority",
        "idempotency_key",
        "max_attempts",
        "labels",
        "tenant",
        "timeout",
        "service",
        "depends_on",
        "on_dependency_failure",
        "concurrency_key",
        "memory_limit",
        "cpu_limit",
        "on_conflict",
        "key_scope",
    }
)


def check_timeout(value: float | timedelta, what: str) -> float:
    """A timeout in seconds: positive and finite, else ValueError (TypeError for other types)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{what} must be seconds (a number) or a timedelta, not {value!r}")
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{what} must be positive (None means none), not {value!r}")
    return seconds


class Enqueuer(Protocol):
    """What a task enqueues its jobs through (the App implements it)."""

    @property
    def dsn(self) -> str: ...

    def enqueue_spec(self, spec: JobSpec, *, conn: psycopg.Connection[Any] | None = None) -> JobHandle: ...

    async def enqueue_spec_async(
        self, spec: JobSpec, *, conn: psycopg.AsyncConnection[Any] | None = None
    ) -> JobHandle: ...


class Task(Generic[P, R]):
    """A function registered with an App under a stable name.

    Calling the task calls the function. ``enqueue(...)`` takes the function's
    own arguments (plus ``conn=``) and stores them as a JSON object keyed by
    parameter name; ``using(...)`` sets per-job options.
    """

    def __init__(
        self,
        app: Enqueuer,
        fn: Callable[P, R],
        *,
        name: str,
        queue: str = "default",
        max_attempts: int | None = None,
        priority: int = 0,
        retry_backoff: float | None = None,
        retry_backoff_max: float | None = None,
        retry_jitter: float | None = None,
        labels: Sequence[str] = (),
        timeout: float | None = None,
        service: bool = False,
        key_scope: str | None = None,
    ) -> None:
        check_key_scope(key_scope, f"key_scope of task {name!r}")
        if service and timeout is not None:
            raise ValueError(f"task {name!r}: a service runs until cancelled and takes no timeout")
        self.service = service
        # A service's default resource limits (App.service); None: the install's (config.service_*_limit).
        self.memory_limit: int | None = None
        self.cpu_limit: float | None = None
        self.app = app
        self.fn = fn
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        self.priority = priority
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.retry_jitter = retry_jitter
        self.labels = tuple(labels)
        self.key_scope = key_scope  # how long its jobs' idempotency keys are held (None: the install's)
        self.timeout = None if timeout is None else check_timeout(timeout, f"timeout of task {name!r}")
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        self.context_param = _context_parameter(self.signature)
        self._job_params = {name: p for name, p in self.signature.parameters.items() if name != self.context_param}
        self._job_signature = self.signature.replace(parameters=list(self._job_params.values()))
        kinds = {p.kind for p in self._job_params.values()}
        # Plain parameters only (no *args, **kwargs, positional-only): bound by hand, fast.
        self._simple = kinds <= {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}
        self._positional = [
            name for name, p in self._job_params.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]
        self._required = frozenset(name for name, p in self._job_params.items() if p.default is inspect.Parameter.empty)
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in self.signature.parameters.values()):
            raise TypeError(f"task {name!r}: *args cannot be stored as a JSON object; use named parameters")
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        kind = "Service" if self.service else "Task"
        return f"<{kind} {self.name!r} queue={self.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def bind_args(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Map call arguments to the JSON object stored in the job (parameter name -> value)."""
        if self._simple and len(args) <= len(self._positional):
            out = dict(zip(self._positional, args, strict=False))
            clean = True
            for name, value in kwargs.items():
                if name not in self._job_params or name in out:
                    clean = False  # unknown or repeated: let inspect say exactly what is wrong
                    break
                out[name] = value
            if clean and self._required <= out.keys():
                return out
        params = self._job_params
        try:
            bound = self._job_signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"task {self.name!r}: {exc}") from exc
        found: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if params[name].kind is inspect.Parameter.VAR_KEYWORD:
                found.update(value)
            else:
                found[name] = value
        return found

    def job(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """A JobSpec for this call, for App.enqueue_many()."""
        return JobSpec(
            task=self.name,
            args=self.bind_args(args, kwargs),
            queue=self.queue,
            priority=self.priority,
            max_attempts=self.max_attempts,
            labels=self.labels,
            service=self.service,
            memory_limit=self.memory_limit if self.service else None,
            cpu_limit=self.cpu_limit if self.service else None,
            key_scope=self.key_scope,
        )

    def enqueue(self, *args: Any, conn: psycopg.Connection[Any] | None = None, **kwargs: Any) -> JobHandle:
        """Enqueue a run with these arguments; returns the job id (a JobHandle: ``.wait()`` for the result).

        With ``conn``, the job is written in that connection's current
        transaction and rolls back with it. Without, it commits at once.
        """
        return self.app.enqueue_spec(self.job(*args, **kwargs), conn=conn)

    async def enqueue_async(
        self, *args: Any, conn: psycopg.AsyncConnection[Any] | None = None, **kwargs: Any
    ) -> JobHandle:
        """enqueue() for asyncio: with ``conn`` (a psycopg AsyncConnection), in its current
        transaction and rolled back with it; without, on the app's own async connection."""
        return await self.app.enqueue_spec_async(self.job(*args, **kwargs), conn=conn)

    def using(self, **options: Any) -> BoundTask:
        """Per-job options: queue, run_at, delay, priority, idempotency_key, max_attempts, labels, tenant, timeout,
        service, concurrency_key (docs/dispatch.md), depends_on (job ids or handles; in enqueue_many also
        JobSpecs or Refs of the same batch) and on_dependency_failure ('cancel', the default, 'wait' or 'run'): see
        docs/dependencies.md; on_conflict ('keep', the default, or 'replace': a debounce) and key_scope ('retention',
        the default, or 'active') for the idempotency key."""
        unknown = set(options) - _OPTION_NAMES
        if unknown:
            raise TypeError(f"unknown job option(s): {', '.join(sorted(unknown))}")
        if isinstance(options.get("depends_on"), list):
            options = {**options, "depends_on": tuple(options["depends_on"])}
        return BoundTask(self, options)

    def policy(self) -> dict[str, Any]:
        """This task's retry policy and default labels as pgsched.register_tasks() takes them."""
        return {
            "name": self.name,
            "queue": self.queue,
            "max_attempts": self.max_attempts,
            "backoff_base": self.retry_backoff,
            "backoff_max": self.retry_backoff_max,
            "backoff_jitter": self.retry_jitter,
            "timeout": self.timeout,
            "labels": list(self.labels),  # the default labels of its jobs, for other languages too
        }

    def call_handler(self, ctx: JobContext) -> Any:
        """Invoke the function with the job's args (and the context, if it asks for one)."""
        kwargs = dict(ctx.args)
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        ctx._started = time.perf_counter()
        return self.fn(**kwargs)  # type: ignore[call-arg]


class BoundTask:
    """A task with per-job options set, from Task.using()."""

    def __init__(self, task: Task[Any, Any], options: Mapping[str, Any]) -> None:
        self.task = task
        self.options = dict(options)

    def job(self, *args: Any, **kwargs: Any) -> JobSpec:
        return replace(self.task.job(*args, **kwargs), **self.options)

    def enqueue(self, *args: Any, conn: psycopg.Connection[Any] | None = None, **kwargs: Any) -> JobHandle:
        return self.task.app.enqueue_spec(self.job(*args, **kwargs), conn=conn)

    async def enqueue_async(
        self, *args: Any, conn: psycopg.AsyncConnection[Any] | None = None, **kwargs: Any
    ) -> JobHandle:
        return await self.task.app.enqueue_spec_async(self.job(*args, **kwargs), conn=conn)


def _context_parameter(sig: inspect.Signature) -> str | None:
    for name, param in sig.parameters.items():
        annotation = param.annotation
        if (
            annotation is JobContext
            or annotation == "JobContext"
            or (isinstance(annotation, str) and annotation.endswith(".JobContext"))
        ):
            return name
    return None
