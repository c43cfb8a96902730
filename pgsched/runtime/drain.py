"""Running due jobs in the calling thread, through the real claim/complete path: App.drain(), for tests.

No worker, no threads: promote what is due, claim a batch, run each handler
here, write its outcome with the same fenced complete()/fail()/snooze() a
worker uses, and repeat until nothing is due. A job that fails is retried
with its backoff, so it is not due again at once and the drain ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import class_row, tuple_row

from pgsched.core.job import ClaimedJob, JobContext, _current
from pgsched.core.outcome import Kind, Outcome, from_exception, success
from pgsched.db import queries
from pgsched.db.translate import translated
from pgsched.errors import GiveUp, Retry, Snooze
from pgsched.observe import otel
from pgsched.runtime import dependencies
from pgsched.runtime.completer import _RawJson
from pgsched.runtime.journal import ConnJournal

if TYPE_CHECKING:
    from pgsched.core.registry import Registry
    from pgsched.core.task import Task

_STEERING = (Retry, Snooze, GiveUp)


@dataclass(kw_only=True)
class DrainResult:
    """What a drain did: runs per outcome, and the ids of the jobs it ran, in order."""

    completed: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    snoozed: int = 0
    lost: int = 0
    job_ids: list[int] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return len(self.job_ids)


def drain(
    app: Registry,
    *,
    queues: Sequence[str] | None = None,
    conn: psycopg.Connection[Any] | None = None,
    labels: Sequence[str] | None = None,
    limit: int = 10_000,
    raise_errors: bool = False,
    lease: float = 300.0,
) -> DrainResult:
    """Run every due job of ``queues`` (default: every queue) here until none is due, at most ``limit`` runs.

    With ``conn``, everything happens on that connection (inside its
    transaction, if one is open); else on a new autocommit one. ``labels``
    (default: every label of the app's tasks) is what this drain offers.
    With ``raise_errors``, an exception from a handler (other than Retry,
    Snooze and GiveUp) is raised here once its failure was written.
    """
    result = DrainResult()
    worker = f"drain:{socket.gethostname()}:{os.getpid()}"
    offered = list(labels) if labels is not None else sorted({lb for t in app.tasks.values() for lb in t.labels})
    own = conn is None
    db = app.connect() if conn is None else conn
    load_dependencies = dependencies.on(db)
    with translated():
        try:
            while result.ran < limit:
                with db.cursor(row_factory=tuple_row) as cur:
                    cur.execute(queries.PROMOTE_DUE)
                    names = (
                        list(queues)
                        if queues is not None
                        else [r[0] for r in cur.execute(queries.AVAILABLE_QUEUES).fetchall()]
                    )
                if not names:
                    break
                with db.cursor(row_factory=class_row(ClaimedJob)) as cur:
                    jobs = cur.execute(
                        queries.CLAIM,
                        (worker, names, min(100, limit - result.ran), timedelta(seconds=lease), offered, None),
                    ).fetchall()
                if not jobs:
                    break
                for job in jobs:
                    ctx = JobContext(job=job, worker=worker, _load_dependencies=load_dependencies)
                    journal = ConnJournal(db)
                    ctx._journal = journal
                    if otel.ENABLED and otel.live():
                        with otel.run_span(ctx) as span:
                            outcome, raised = _run(app.tasks.get(job.task), ctx)
                            span.end(outcome)
                    else:
                        outcome, raised = _run(app.tasks.get(job.task), ctx)
                    journal.settle(ctx)  # the last progress report, before the row moves to history
                    state = _write(db, outcome)
                    result.job_ids.append(job.id)
                    _count(result, outcome, state)
                    if raise_errors and raised is not None and not isinstance(raised, _STEERING):
                        raise raised
        finally:
            if own:
                db.close()
    return result


def _run(task: Task[Any, Any] | None, ctx: JobContext) -> tuple[Outcome, BaseException | None]:
    job = ctx.job
    if task is None:
        unknown = f"unknown task {job.task!r}: no handler is registered under this name"
        return Outcome(job, Kind.DEAD, error=unknown), None
    if task.is_async:
        return _run_coroutine(task, ctx)
    token = _current.set(ctx)
    try:
        value = task.call_handler(ctx)
        if asyncio.iscoroutine(value):  # a sync wrapper around a coroutine function
            value = _in_new_loop(value)
        return success(job, value), None
    except Exception as exc:
        return from_exception(job, exc), exc
    finally:
        _current.reset(token)


def _run_coroutine(task: Task[Any, Any], ctx: JobContext) -> tuple[Outcome, BaseException | None]:
    async def run() -> tuple[Outcome, BaseException | None]:
        token = _current.set(ctx)
        try:
            coro = task.call_handler(ctx)
            value = await (asyncio.wait_for(coro, task.timeout) if task.timeout else coro)
            return success(ctx.job, value), None
        except Exception as exc:
            return from_exception(ctx.job, exc), exc
        finally:
            _current.reset(token)

    found: tuple[Outcome, BaseException | None] = _in_new_loop(run())
    return found


def _in_new_loop(coro: Any) -> Any:
    """Run a coroutine to the end from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _write(conn: psycopg.Connection[Any], outcome: Outcome) -> str:
    job = outcome.job
    with conn.cursor(row_factory=tuple_row) as cur:
        if outcome.kind is Kind.COMPLETE:
            result = None if outcome.result is None else _RawJson(outcome.result)
            row = cur.execute(queries.COMPLETE, ([job.id], [job.lease_token], [result], [job.shard])).fetchone()
            return "completed" if row and row[1] else "lease_lost"
        if outcome.kind is Kind.SNOOZE:
            row = cur.execute(queries.SNOOZE, (job.id, job.lease_token, outcome.delay)).fetchone()
        else:
            row = cur.execute(
                queries.FAIL,
                (
                    job.id,
                    job.lease_token,
                    outcome.error or "",
                    outcome.delay if outcome.kind is Kind.RETRY_AT else None,
                    outcome.kind is Kind.DEAD,
                    outcome.result,
                ),
            ).fetchone()
    assert row is not None
    return str(row[0])


def _count(result: DrainResult, outcome: Outcome, state: str) -> None:
    if state == "completed":
        result.completed += 1
    elif state == "dead":
        result.dead += 1
    elif state == "cancelled":
        result.cancelled += 1
    elif state == "lease_lost":
        result.lost += 1
    elif outcome.kind is Kind.SNOOZE:
        result.snoozed += 1
    else:
        result.retried += 1
