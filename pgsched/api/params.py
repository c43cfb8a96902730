"""The SQL functions' parameters for one job, a batch, a service and a command job, checked before any round trip."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from pgsched.core.job import to_json
from pgsched.core.policies import ConflictPolicy
from pgsched.core.task import JobSpec, Ref, check_labels, check_max_attempts, check_resource_limits


def _job_params(spec: JobSpec) -> tuple[Any, ...]:
    """The parameters enqueue and enqueue_service share, in their order."""
    return (
        spec.task,
        Jsonb(spec.args, dumps=lambda _: spec.args_json()),
        spec.queue,
        spec.run_at,
        spec.delay,
        spec.priority,
        spec.idempotency_key,
        spec.max_attempts,
        list(spec.labels) or None,  # none: NULL, as the SQL functions read it (an empty array costs more to send)
        spec.tenant,
    )


def _timeout_interval(spec: JobSpec) -> timedelta | None:
    """The job's own timeout as the interval the SQL functions take (None: the task's, else none); the JobSpec
    checked it when it was made."""
    if spec.timeout is None or isinstance(spec.timeout, timedelta):
        return spec.timeout
    return timedelta(seconds=spec.timeout)


def enqueue_params(spec: JobSpec, trace_context: str | None = None) -> tuple[Any, ...]:
    return (
        *_job_params(spec),
        _timeout_interval(spec),
        _dependency_ids(spec) or None,
        spec.on_dependency_failure,
        trace_context,
        spec.concurrency_key,
        spec.on_conflict,
        spec.key_scope,
    )


def service_params(spec: JobSpec) -> tuple[Any, ...]:
    """enqueue_service's parameters: a service has no timeout and no dependencies; it has resource limits."""
    if spec.timeout is not None or spec.depends_on:
        raise ValueError(f"a {spec.task!r} service runs until cancelled: it takes no timeout and no depends_on")
    if spec.on_conflict == ConflictPolicy.REPLACE or spec.key_scope is not None:
        raise ValueError(
            f"a {spec.task!r} service holds its idempotency key while it runs: it takes no on_conflict or key_scope"
        )
    return (*_job_params(spec), spec.memory_limit, spec.cpu_limit)


def plain_jobs(jobs: Iterable[JobSpec]) -> list[JobSpec]:
    specs = list(jobs)
    for i, spec in enumerate(specs):
        if spec.service:
            raise ValueError(f"job {i + 1} of the batch is a service: enqueue services one at a time (enqueue_spec)")
        if spec.on_conflict == ConflictPolicy.REPLACE:
            raise ValueError(f"job {i + 1} of the batch has on_conflict='replace': replace one job at a time (enqueue)")
    return specs


def with_callback(specs: list[JobSpec], then: JobSpec | None) -> list[JobSpec]:
    """The batch with ``then`` appended, depending on every job of it (a fan-in whatever the outcomes)."""
    if then is None:
        return specs
    if not isinstance(then, JobSpec):
        raise TypeError(f"then takes a JobSpec (task.job(...)), not {then!r}")
    if not specs:
        raise ValueError("then= needs a batch to wait for: the batch is empty")
    if then.service:
        raise ValueError("then= cannot be a service: it runs once, after the batch")
    callback = replace(
        then,
        depends_on=(*then.depends_on, *(Ref(i) for i in range(len(specs)))),
        on_dependency_failure=then.on_dependency_failure or "run",
    )
    return [*specs, callback]


def command_params(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | None,
    timeout: float | timedelta | None,
    queue: str | None,
    max_attempts: int | None,
    run_at: datetime | None,
    delay: timedelta | None,
    priority: int | None,
    idempotency_key: str | None,
    labels: Sequence[str] | None,
    tenant: str | None,
) -> tuple[Any, ...]:
    """enqueue_command's parameters, checked as the database will (and for NUL bytes, which it cannot carry)."""
    from pgsched.runtime.commands import check_command

    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)):
        raise TypeError(f"timeout must be seconds or a timedelta, not {timeout!r}")
    args, variables = check_command(argv, env, cwd, seconds)
    check_max_attempts(max_attempts, "max_attempts")
    if labels is not None:
        check_labels(labels, "labels")
    return (
        args,
        Jsonb(variables),
        cwd,
        None if seconds is None else timedelta(seconds=seconds),
        queue,
        max_attempts,
        run_at,
        delay,
        priority,
        idempotency_key,
        list(labels or ()),
        tenant,
    )


def limit_params(memory_limit: int | None, cpu_limit: float | None) -> tuple[Any, ...]:
    check_resource_limits(memory_limit, cpu_limit, "a command")
    return (memory_limit, cpu_limit)


def _dependency_ids(spec: JobSpec) -> list[int]:
    for dep in spec.depends_on:
        if not isinstance(dep, int):
            raise TypeError(
                f"depends_on of a {spec.task!r} job: {dep!r} refers to a job of a batch; use App.enqueue_many()"
            )
    return [int(d) for d in spec.depends_on if isinstance(d, int)]


def _dependency_json(specs: Sequence[JobSpec]) -> str | None:
    """Each job's dependencies as enqueue_many takes them: ids, and -n for the n-th (1-based) row of the batch."""
    if not any(s.depends_on for s in specs):
        return None
    position = {id(s): n for n, s in enumerate(specs)}
    rows = []
    for spec in specs:
        row = []
        for dep in spec.depends_on:
            if isinstance(dep, Ref):
                row.append(-(dep.index + 1))
            elif isinstance(dep, JobSpec):
                if id(dep) not in position:
                    raise ValueError(f"depends_on of a {spec.task!r} job names a {dep.task!r} job not in this batch")
                row.append(-(position[id(dep)] + 1))
            else:
                row.append(int(dep))
        rows.append(row)
    return json.dumps(rows)


def _args_array(specs: Sequence[JobSpec]) -> str:
    """The batch's args as one JSON array, encoded in one call; a job whose args JSON cannot carry is named."""
    try:
        return to_json([s.args for s in specs])
    except (TypeError, ValueError):
        for spec in specs:
            spec.args_json()  # raises, naming the task
        raise


def _given(values: list[Any]) -> list[Any] | None:
    """``values``, or None when every one is None (the database reads a NULL array as all defaults)."""
    return values if any(v is not None for v in values) else None


def enqueue_many_params(specs: Sequence[JobSpec], trace_context: str | None = None) -> tuple[Any, ...]:
    timeouts = [_timeout_interval(s) for s in specs] if any(s.timeout is not None for s in specs) else None
    keys = [s.concurrency_key for s in specs] if any(s.concurrency_key is not None for s in specs) else None
    labels = json.dumps([list(s.labels) for s in specs]) if any(s.labels for s in specs) else None
    # An array whose every element means the default goes as NULL: the database reads both alike
    # (a missing queue is 'default', a missing priority 0), and a batch's arrays are most of its encoding.
    timed = any(s.run_at is not None or s.delay is not None for s in specs)
    return (
        [s.task for s in specs],
        _args_array(specs),
        [s.queue for s in specs] if any(s.queue not in (None, "default") for s in specs) else None,
        [s.run_at for s in specs] if timed else None,
        [s.delay for s in specs] if timed else None,
        [s.priority for s in specs] if any(s.priority for s in specs) else None,
        _given([s.idempotency_key for s in specs]),
        _given([s.max_attempts for s in specs]),
        _given([s.tenant for s in specs]),
        labels,
        _dependency_json(specs),
        [s.on_dependency_failure for s in specs] if any(s.on_dependency_failure for s in specs) else None,
        trace_context,
        timeouts,
        keys,
        [s.key_scope for s in specs] if any(s.key_scope is not None for s in specs) else None,
    )
