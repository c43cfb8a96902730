"""Runs handlers: sync ones on a pool of threads, async ones on an event loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import queue
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from pgsched.errors import LeaseLost
from pgsched.job import JobContext, _current
from pgsched.outcome import Kind, Outcome, from_exception, success
from pgsched.task import Task

log = logging.getLogger(__name__)

Resolve = Callable[[str], "Task[Any, Any] | None"]
Done = Callable[[JobContext, Outcome], None]
T = TypeVar("T")


def run_sync(
    task: Task[Any, Any] | None,
    ctx: JobContext,
    await_value: Callable[[Awaitable[Any]], Any] | None = None,
) -> Outcome:
    """Run one job's handler in this thread and say what should happen to the job.

    A plain function that returns an awaitable (a sync decorator around an
    ``async def``) has it awaited through ``await_value``, so the work runs
    instead of being completed unstarted.
    """
    job = ctx.job
    if task is None:
        return Outcome(job, Kind.DEAD, error=f"unknown task {job.task!r}: no handler is registered under this name")
    token = _current.set(ctx)
    try:
        value = task.call_handler(ctx)
        if await_value is not None and inspect.isawaitable(value):
            value = await_value(value)
        return success(job, value)
    except (asyncio.CancelledError, concurrent.futures.CancelledError):
        if ctx.lease_lost:
            return Outcome(job, Kind.DISCARD, error="lease lost")
        return from_exception(job, _cancelled(ctx))
    except BaseException as exc:
        return from_exception(job, exc)
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
        return from_exception(job, _cancelled(ctx))
    except BaseException as exc:
        return from_exception(job, exc)
    finally:
        _current.reset(token)


def _cancelled(ctx: JobContext) -> BaseException:
    from pgsched.errors import JobCancelled

    if ctx.lease_lost:
        return LeaseLost(f"job {ctx.id}: lease lost")
    return JobCancelled(f"job {ctx.id}: cancellation requested")


class Executor:
    """Slots for running handlers. ``submit`` never blocks; the worker bounds what it submits.

    Every job waits in one queue for one of ``concurrency`` slots, whatever its
    kind: a slot runs a sync handler itself, or hands a coroutine to the event
    loop and waits for it, so sync and async handlers share the same limit.
    """

    def __init__(self, concurrency: int, resolve: Resolve, done: Done) -> None:
        self._resolve = resolve
        self._done = done
        self._queue: queue.SimpleQueue[JobContext | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._thread_loop, name=f"pgsched-handler-{i}", daemon=True)
            for i in range(concurrency)
        ]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        self._loop_thread: threading.Thread | None = None
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self._started = threading.Event()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
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
        self._queue.put(ctx)

    def _run(self, ctx: JobContext) -> Outcome:
        task = self._resolve(ctx.job.task)
        if ctx.cancel_requested:
            # Cancelled (or lost) while it waited for a slot: do not start it.
            return _stopped_before_start(ctx)
        if task is not None and task.is_async:
            try:
                return self._on_loop(ctx, run_async(task, ctx))
            except (asyncio.CancelledError, concurrent.futures.CancelledError):
                return _stopped_before_start(ctx)
        return run_sync(task, ctx, lambda awaitable: self._on_loop(ctx, _await(awaitable)))

    def _on_loop(self, ctx: JobContext, coro: Coroutine[Any, Any, T]) -> T:
        """Run coro on the event loop as ctx's job (cancel_async reaches it), holding this slot until it ends."""
        return asyncio.run_coroutine_threadsafe(self._tracked(ctx, coro), self._ensure_loop()).result()

    async def _tracked(self, ctx: JobContext, coro: Coroutine[Any, Any, T]) -> T:
        # Registered before the first await, on the loop: cancel_async() either
        # finds this task, or ran before it and had already set the context.
        current = asyncio.current_task()
        assert current is not None
        self._tasks[ctx.id] = current
        _current.set(ctx)  # this task's own copy of the context
        try:
            if ctx.cancel_requested:
                coro.close()
                raise asyncio.CancelledError
            return await coro
        finally:
            self._tasks.pop(ctx.id, None)

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
        """Remove and return the jobs that wait for a slot (for handing back at shutdown)."""
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
            outcome = self._run(ctx)
            try:
                self._done(ctx, outcome)
            except Exception:  # pragma: no cover - a bug in the worker, keep the thread alive
                log.exception("recording the outcome of job %s failed", ctx.id)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        loop = self._loop
        if loop is not None:

            def stop() -> None:
                # Whatever still runs was handed back already; its outcome is discarded.
                for running in list(self._tasks.values()):
                    running.cancel()
                loop.call_later(0.05, loop.stop)

            loop.call_soon_threadsafe(stop)


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _stopped_before_start(ctx: JobContext) -> Outcome:
    if ctx.lease_lost:
        return Outcome(ctx.job, Kind.DISCARD, error="lease lost")
    return from_exception(ctx.job, _cancelled(ctx))
