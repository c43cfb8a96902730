"""Running one job's handler, sync or async, in the calling thread or loop, and the outcome it leads to."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pgsched.core.job import JobContext, _current
from pgsched.core.outcome import Kind, Outcome, from_exception, success, timed_out
from pgsched.core.task import Task
from pgsched.errors import LeaseLost
from pgsched.observe import otel

T = TypeVar("T")


def run_sync(
    task: Task[Any, Any] | None,
    ctx: JobContext,
    await_value: Callable[[Awaitable[Any]], Any] | None = None,
) -> Outcome:
    """Run one job's handler in this thread and say what should happen to the job.

    A plain function that returns an awaitable (a sync decorator around an
    ``async def``) has it awaited through ``await_value``, so the work runs
    instead of being completed unstarted. With pgsched[otel], inside a span.
    """
    if otel.ENABLED and otel.live():
        with otel.run_span(ctx) as span:
            outcome = span.end(_run_sync(task, ctx, await_value))
    else:
        outcome = _run_sync(task, ctx, await_value)
    if ctx._progress_pending and ctx._journal is not None:
        ctx._journal.settle(ctx)  # the last progress report goes before the outcome
    return outcome


def _run_sync(
    task: Task[Any, Any] | None,
    ctx: JobContext,
    await_value: Callable[[Awaitable[Any]], Any] | None,
) -> Outcome:
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


def time_limit(task: Task[Any, Any] | None, ctx: JobContext) -> float | None:
    """Seconds this run may take: the job's timeout as its start recorded it, else the task's."""
    if ctx.timeout is not None:
        return ctx.timeout
    return None if task is None else task.timeout


async def run_async(task: Task[Any, Any], ctx: JobContext) -> Outcome:
    """Run one job's coroutine handler, honouring its time limit (see time_limit; with pgsched[otel], inside a
    span)."""
    if otel.ENABLED and otel.live():
        with otel.run_span(ctx) as span:
            outcome = span.end(await _run_async(task, ctx))
    else:
        outcome = await _run_async(task, ctx)
    if ctx._progress_pending and ctx._journal is not None:
        await asyncio.to_thread(ctx._journal.settle, ctx)  # the last progress report goes before the outcome
    return outcome


async def _run_async(task: Task[Any, Any], ctx: JobContext) -> Outcome:
    job = ctx.job
    token = _current.set(ctx)
    limit = time_limit(task, ctx)
    scope: asyncio.Timeout | None = None
    try:
        coro = task.call_handler(ctx)
        if limit is None:
            value = await coro
        else:
            async with asyncio.timeout(limit) as scope:
                value = await coro
        return success(job, value)
    except TimeoutError as exc:
        if scope is not None and scope.expired():
            ctx._mark_timed_out()
            return timed_out(job, limit or 0.0)
        return from_exception(job, exc)
    except asyncio.CancelledError:
        if ctx.lease_lost:
            return Outcome(job, Kind.DISCARD, error="lease lost")
        return from_exception(job, _cancelled(ctx))
    except BaseException as exc:
        return from_exception(job, exc)
    finally:
        _current.reset(token)


def _cancelled(ctx: JobContext) -> BaseException:
    from pgsched.errors import JobCancelled, WorkerStopping

    if ctx.lease_lost:
        return LeaseLost(f"job {ctx.id}: lease lost")
    if ctx.cancel_requested:
        return JobCancelled(f"job {ctx.id}: cancellation requested")
    return WorkerStopping(f"job {ctx.id}: the worker is stopping")


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _stopped_before_start(ctx: JobContext) -> Outcome:
    if ctx.lease_lost:
        return Outcome(ctx.job, Kind.DISCARD, error="lease lost")
    return from_exception(ctx.job, _cancelled(ctx))
