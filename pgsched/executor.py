"""Runs handlers: sync ones on a pool of threads, async ones on an event loop thread."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pgsched.errors import LeaseLost
from pgsched.job import JobContext, _current
from pgsched.outcome import Kind, Outcome, from_exception, success
from pgsched.task import Task

log = logging.getLogger(__name__)

Resolve = Callable[[str], "Task[Any, Any] | None"]
Done = Callable[[JobContext, Outcome], None]


def run_sync(task: Task[Any, Any] | None, ctx: JobContext) -> Outcome:
    """Run one job's handler in this thread and say what should happen to the job."""
    job = ctx.job
    if task is None:
        return Outcome(job, Kind.DEAD, error=f"unknown task {job.task!r}: no handler is registered under this name")
    token = _current.set(ctx)
    try:
        return success(job, task.call_handler(ctx))
    except BaseException as exc:  # noqa: BLE001 - every failure is the job's outcome
        return from_exception(job, exc, datetime.now(UTC))
    finally:
        _current.reset(token)


async def run_async(task: Task[Any, Any], ctx: JobContext) -> Outcome:
    """Run one job's coroutine handler, honouring the task's timeout."""
    job = ctx.job
    token = _current.set(ctx)
    try:
        coro = task.call_handler(ctx)
        value = await (asyncio.wait_for(coro, task.timeout) if task.timeout else coro)
        return success(job, value)
    except asyncio.CancelledError:
        if ctx.lease_lost:
            return Outcome(job, Kind.DISCARD, error="lease lost")
        return from_exception(job, _cancelled(ctx), datetime.now(UTC))
    except BaseException as exc:  # noqa: BLE001 - every failure is the job's outcome
        return from_exception(job, exc, datetime.now(UTC))
    finally:
        _current.reset(token)


def _cancelled(ctx: JobContext) -> BaseException:
    from pgsched.errors import JobCancelled

    if ctx.lease_lost:
        return LeaseLost(f"job {ctx.id}: lease lost")
    return JobCancelled(f"job {ctx.id}: cancellation requested")


class Executor:
    """Slots for running handlers. ``submit`` never blocks; the worker bounds what it submits."""

    def __init__(self, concurrency: int, resolve: Resolve, done: Done) -> None:
        self._resolve = resolve
        self._done = done
        self._queue: queue.SimpleQueue[JobContext | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._thread_loop, name=f"pgsched-handler-{i}", daemon=True)
            for i in range(concurrency)
        ]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._tasks: dict[int, asyncio.Task[Outcome]] = {}
        self._started = threading.Event()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._loop_thread = threading.Thread(target=self._run_loop, name="pgsched-async", daemon=True)
            self._loop_thread.start()
            self._started.wait()
        return self._loop

    def _run_loop(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._started.set)
        self._loop.run_forever()

    def submit(self, ctx: JobContext) -> None:
        task = self._resolve(ctx.job.task)
        if task is not None and task.is_async:
            loop = self._ensure_loop()
            loop.call_soon_threadsafe(self._start_async, task, ctx)
        else:
            self._queue.put(ctx)

    def _start_async(self, task: Task[Any, Any], ctx: JobContext) -> None:
        assert self._loop is not None
        running = self._loop.create_task(run_async(task, ctx))
        self._tasks[ctx.id] = running

        def finished(t: asyncio.Task[Outcome]) -> None:
            self._tasks.pop(ctx.id, None)
            self._done(ctx, t.result())

        running.add_done_callback(finished)

    def cancel_async(self, job_id: int) -> None:
        """Cancel the coroutine of a job, if it is one (sync handlers watch their context instead)."""
        loop = self._loop
        if loop is None:
            return

        def cancel() -> None:
            running = self._tasks.get(job_id)
            if running is not None:
                running.cancel()

        loop.call_soon_threadsafe(cancel)

    def take_unstarted(self) -> list[JobContext]:
        """Remove and return the jobs that wait for a thread (for handing back at shutdown)."""
        taken: list[JobContext] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return taken
            if item is not None:
                taken.append(item)

    def _thread_loop(self) -> None:
        while True:
            ctx = self._queue.get()
            if ctx is None:
                return
            outcome = run_sync(self._resolve(ctx.job.task), ctx)
            try:
                self._done(ctx, outcome)
            except Exception:  # pragma: no cover - a bug in the worker, keep the thread alive
                log.exception("recording the outcome of job %s failed", ctx.id)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
