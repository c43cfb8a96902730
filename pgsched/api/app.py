"""The App: registered tasks and schedules, and the producer side (enqueue, cancel, retry)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg

from pgsched.api.events import EventHooks, H
from pgsched.api.params import (
    command_params,
    enqueue_many_params,
    enqueue_params,
    limit_params,
    plain_jobs,
    service_params,
    with_callback,
)
from pgsched.core.handle import JobHandle
from pgsched.core.registry import Registry, ScheduleSpec, schedule_params
from pgsched.core.task import JobSpec, Task
from pgsched.db import queries
from pgsched.db.producer import Producer
from pgsched.errors import PgschedError
from pgsched.observe import otel

if TYPE_CHECKING:
    from pgsched.runtime.drain import DrainResult


class App(Registry):
    """Tasks and schedules of one application, and the way to its database.

    The DSN is, in order: the ``dsn`` argument, PGSCHED_DSN, DATABASE_URL,
    else the embedded server (started and migrated on first use).
    """

    def __init__(self, dsn: str | None = None, *, name: str = "pgsched") -> None:
        super().__init__()
        self._dsn = dsn
        self.name = name
        # The app's own connections, for the calls made without conn=.
        self._own = Producer(lambda: self.dsn)
        self.event_hooks = EventHooks()

    # -- configuration ---------------------------------------------------

    @property
    def dsn(self) -> str:
        """The resolved DSN (may start the embedded server)."""
        if self._dsn is None:
            from pgsched.db.settings import resolve_dsn

            self._dsn = resolve_dsn()
        return self._dsn

    def configure(self, dsn: str) -> None:
        """Point the app at another database (the CLI's --dsn does this)."""
        self.close()
        self._dsn = dsn

    def sync_tasks(self, conn: psycopg.Connection[Any] | None = None) -> int:
        """Register the tasks' policies (queue, max_attempts, backoff, timeout, labels) in pgsched.tasks, as a
        worker does at start, so SQL and CLI enqueues use them before any worker ran; returns how many rows
        were added or changed (0 when the database already had them all)."""
        if not self.tasks:
            return 0
        rows = self._run(conn, queries.REGISTER_TASKS, [json.dumps([t.policy() for t in self.tasks.values()])])
        return int(rows[0][0]) if rows else 0

    def sync_schedules(self, conn: psycopg.Connection[Any] | None = None) -> int:
        """Write the schedules defined in code into pgsched.schedules; returns how many."""
        for spec in self.schedules.values():
            self._run(conn, queries.UPSERT_SCHEDULE, schedule_params(spec))
        return len(self.schedules)

    # -- connections -------------------------------------------------------

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """A new autocommit connection to the app's database."""
        return self._own.connect(**kwargs)

    def _run(self, conn: psycopg.Connection[Any] | None, query: Any, params: Sequence[Any]) -> list[Any]:
        return self._own.run(conn, query, params)

    async def _arun(self, conn: psycopg.AsyncConnection[Any] | None, query: Any, params: Sequence[Any]) -> list[Any]:
        return await self._own.arun(conn, query, params)

    def close(self) -> None:
        """Close the app's own connections (enqueues without conn= reopen them)."""
        self._own.close()

    # -- producing -------------------------------------------------------

    def enqueue(
        self,
        task: str | Task[Any, Any],
        args: dict[str, Any] | None = None,
        *,
        conn: psycopg.Connection[Any] | None = None,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        labels: Sequence[str] | None = None,
        tenant: str | None = None,
        timeout: float | timedelta | None = None,
        depends_on: Sequence[int] = (),
        on_dependency_failure: str | None = None,
        concurrency_key: str | None = None,
        on_conflict: str | None = None,
        key_scope: str | None = None,
    ) -> JobHandle:
        """Enqueue a job of a task by name (registered or not) with JSON args; returns the job id (a JobHandle).

        Options left None take the registered task's values, else the database's defaults.
        ``timeout`` (seconds or a timedelta) limits each run: past it the run fails
        ('timed out after N s') and is retried by the task's policy; None: the task's.
        ``on_conflict='replace'`` gives a job already holding ``idempotency_key`` these args,
        run time and priority while it has not started (a debounce; ReplaceRefused once it
        started); ``key_scope='active'`` holds the key only while the job is active.
        """
        registered = task if isinstance(task, Task) else self.tasks.get(task)
        name = task.name if isinstance(task, Task) else task
        # Only None means "the task's default": 0, "" and () are values (and may be refused).
        spec = JobSpec(
            task=name,
            args=args if args is not None else {},
            queue=queue if queue is not None else (registered.queue if registered else None),
            run_at=run_at,
            delay=delay,
            priority=priority if priority is not None else (registered.priority if registered else None),
            idempotency_key=idempotency_key,
            max_attempts=max_attempts
            if max_attempts is not None
            else (registered.max_attempts if registered else None),
            labels=labels if labels is not None else (registered.labels if registered else ()),
            tenant=tenant,
            timeout=timeout,
            service=registered.service if registered else False,
            depends_on=tuple(depends_on),
            on_dependency_failure=on_dependency_failure,
            concurrency_key=concurrency_key,
            on_conflict=on_conflict,
            key_scope=key_scope if key_scope is not None else (registered.key_scope if registered else None),
        )
        return self.enqueue_spec(spec, conn=conn)

    def enqueue_spec(self, spec: JobSpec, *, conn: psycopg.Connection[Any] | None = None) -> JobHandle:
        """Enqueue one JobSpec in one round trip; returns the job id (the holder's, for a repeated key)."""
        if spec.service:
            return JobHandle(int(self._run(conn, queries.ENQUEUE_SERVICE, service_params(spec))[0][0]), self)
        if otel.ENABLED and otel.live():
            with otel.enqueue_span([spec]) as sending:
                job_id = int(self._run(conn, queries.ENQUEUE, enqueue_params(spec, sending.context))[0][0])
                sending.sent([job_id])
                return JobHandle(job_id, self)
        return JobHandle(int(self._run(conn, queries.ENQUEUE, enqueue_params(spec))[0][0]), self)

    async def enqueue_spec_async(self, spec: JobSpec, *, conn: psycopg.AsyncConnection[Any] | None = None) -> JobHandle:
        """enqueue_spec() for asyncio: with ``conn`` (an AsyncConnection) in its current transaction."""
        if spec.service:
            rows = await self._arun(conn, queries.ENQUEUE_SERVICE, service_params(spec))
            return JobHandle(int(rows[0][0]), self)
        if otel.ENABLED and otel.live():
            with otel.enqueue_span([spec]) as sending:
                rows = await self._arun(conn, queries.ENQUEUE, enqueue_params(spec, sending.context))
                sending.sent([int(rows[0][0])])
                return JobHandle(int(rows[0][0]), self)
        return JobHandle(int((await self._arun(conn, queries.ENQUEUE, enqueue_params(spec)))[0][0]), self)

    def enqueue_many(
        self, jobs: Iterable[JobSpec], *, conn: psycopg.Connection[Any] | None = None, then: JobSpec | None = None
    ) -> list[JobHandle]:
        """Enqueue many jobs in one statement and one round trip; returns their ids in order.

        All or nothing: with ``conn`` the jobs are written in its current
        transaction, else in one transaction of their own; a refused job
        (InvalidJob, naming its 1-based position in the batch, its column and
        its value) leaves none of them behind. ``then``: a batch callback, a
        job that runs once every job of the batch finished, whatever the
        outcome (``on_dependency_failure='run'`` unless it says otherwise),
        and reads their outcomes in ``ctx.dependencies``; its handle comes last.
        """
        specs = with_callback(plain_jobs(jobs), then)
        if not specs:
            return []
        if otel.ENABLED and otel.live():
            with otel.enqueue_span(specs) as sending:
                rows = self._run(conn, queries.ENQUEUE_MANY, enqueue_many_params(specs, sending.context))
                sending.sent([int(r[0]) for r in rows])
                return [JobHandle(int(r[0]), self) for r in rows]
        return [JobHandle(int(r[0]), self) for r in self._run(conn, queries.ENQUEUE_MANY, enqueue_many_params(specs))]

    async def enqueue_many_async(
        self,
        jobs: Iterable[JobSpec],
        *,
        conn: psycopg.AsyncConnection[Any] | None = None,
        then: JobSpec | None = None,
    ) -> list[JobHandle]:
        """enqueue_many() for asyncio: one statement, in ``conn``'s current transaction when given."""
        specs = with_callback(plain_jobs(jobs), then)
        if not specs:
            return []
        if otel.ENABLED and otel.live():
            with otel.enqueue_span(specs) as sending:
                rows = await self._arun(conn, queries.ENQUEUE_MANY, enqueue_many_params(specs, sending.context))
                sending.sent([int(r[0]) for r in rows])
                return [JobHandle(int(r[0]), self) for r in rows]
        rows = await self._arun(conn, queries.ENQUEUE_MANY, enqueue_many_params(specs))
        return [JobHandle(int(r[0]), self) for r in rows]

    def enqueue_command(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | timedelta | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        labels: Sequence[str] | None = None,
        tenant: str | None = None,
        memory_limit: int | None = None,
        cpu_limit: float | None = None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> JobHandle:
        """Enqueue a command job (pgsched.enqueue_command; needs the role pgsched_command): run argv on a
        ``--commands`` worker, no shell, ``env`` over a minimal environment, killed after ``timeout``
        (seconds or a timedelta). Its result: exit_code, stdout, stderr, duration_s (docs/commands.md).
        ``memory_limit`` (MiB) and ``cpu_limit`` (CPUs) bound each run; None: config.command_memory_limit and
        command_cpu_limit (512 MiB and 1 CPU unless changed), 0: no limit.

        Refused with ValueError/TypeError before any round trip: an empty argv, a
        non-string or NUL-bearing element or env value, a relative cwd, sizes past
        the limits; the database checks the same again.
        """
        params = command_params(
            argv, env, cwd, timeout, queue, max_attempts, run_at, delay, priority, idempotency_key, labels, tenant
        ) + limit_params(memory_limit, cpu_limit)
        return JobHandle(int(self._run(conn, queries.ENQUEUE_COMMAND, params)[0][0]), self)

    async def enqueue_command_async(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | timedelta | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        labels: Sequence[str] | None = None,
        tenant: str | None = None,
        memory_limit: int | None = None,
        cpu_limit: float | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> JobHandle:
        """enqueue_command() for asyncio: with ``conn`` (an AsyncConnection) in its current transaction."""
        params = command_params(
            argv, env, cwd, timeout, queue, max_attempts, run_at, delay, priority, idempotency_key, labels, tenant
        ) + limit_params(memory_limit, cpu_limit)
        return JobHandle(int((await self._arun(conn, queries.ENQUEUE_COMMAND, params))[0][0]), self)

    def job(self, job_id: int) -> JobHandle:
        """A handle on an existing job by id: its status, and wait() for its result."""
        return JobHandle(int(job_id), self)

    def cancel(self, job_id: int, *, conn: psycopg.Connection[Any] | None = None) -> str:
        """Cancel a job: 'cancelled', 'cancel_requested', 'already_<state>' or 'not_found'."""
        return str(self._run(conn, queries.CANCEL, (job_id,))[0][0])

    async def cancel_async(self, job_id: int, *, conn: psycopg.AsyncConnection[Any] | None = None) -> str:
        """cancel() for asyncio: with ``conn`` in its current transaction (rolled back with it)."""
        return str((await self._arun(conn, queries.CANCEL, (job_id,)))[0][0])

    def retry(self, job_id: int, *, conn: psycopg.Connection[Any] | None = None) -> str:
        """Redrive a dead or cancelled job: 'retried', 'active', 'not_retryable' or 'not_found'."""
        return str(self._run(conn, queries.RETRY, (job_id,))[0][0])

    async def retry_async(self, job_id: int, *, conn: psycopg.AsyncConnection[Any] | None = None) -> str:
        """retry() for asyncio."""
        return str((await self._arun(conn, queries.RETRY, (job_id,)))[0][0])

    # -- tests -----------------------------------------------------------

    def drain(
        self,
        *,
        queues: Sequence[str] | None = None,
        conn: psycopg.Connection[Any] | None = None,
        limit: int = 10_000,
        raise_errors: bool = False,
    ) -> DrainResult:
        """Run every due job here, through the real claim/complete path, until none is due (pgsched.runtime.drain)."""
        from pgsched.runtime.drain import drain

        return drain(self, queues=queues, conn=conn, limit=limit, raise_errors=raise_errors)

    # -- events ----------------------------------------------------------

    def on_event(self, *states: str) -> Callable[[H], H]:
        """Register a hook for status events: ``@app.on_event("completed")`` (no states: all three).

        The hook gets a pgsched.Event. Hooks run where the event stream
        is followed: ``pgsched events --follow --app MODULE:APP``, or
        ``app.follow_events()`` in a process of your own (docs/events.md).
        """
        return self.event_hooks.register(*states)

    def follow_events(
        self,
        *,
        since: int | None = None,
        stop: threading.Event | None = None,
        poll_interval: float = 1.0,
        on_position: Callable[[int], None] | None = None,
    ) -> int:
        """Run the registered hooks for every event from position ``since`` (default: now) until ``stop``.

        Each event reaches the hooks once per follower, in stream order.
        ``on_position`` is called with the position to resume from once the
        hooks of a transaction's events all ran (persist it to resume: events of
        one transaction share a position); returns the last position.
        """
        from pgsched.api.events import EventFollower

        follower = EventFollower(self.dsn, since=since, stop=stop, poll_interval=poll_interval)
        saved = since
        try:
            for event in follower:
                self.event_hooks.run(event)
                if on_position is not None and follower.position is not None and follower.position != saved:
                    saved = follower.position
                    on_position(saved)
        finally:
            self.event_hooks.close()
        return follower.position or 0

    # -- running ---------------------------------------------------------

    def run_worker(self, **options: Any) -> int:
        """Run a worker in this process until it is stopped (see pgsched.runtime.worker.Worker)."""
        from pgsched.runtime.options import WorkerOptions
        from pgsched.runtime.worker import Worker

        return Worker(self, WorkerOptions(**options)).run()


__all__ = ["App", "PgschedError", "ScheduleSpec"]
