"""Jobs as the worker sees them: the claimed row, the handler's context, and job states."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from pgsched.errors import JobCancelled, LeaseLost, WorkerStopping

# Compact JSON, NaN refused; one encoder for every call (json.dumps with options builds one per call).
to_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

# The idempotency key the database gives a schedule's occurrence (add_occurrences): it names the fire time.
_OCCURRENCE_KEY = re.compile(r"pgsched:schedule:[A-Za-z0-9_.:-]+:(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")


def fire_time(idempotency_key: str | None) -> datetime | None:
    """The fire time of a schedule's occurrence, read from its idempotency key; None for any other key."""
    found = _OCCURRENCE_KEY.fullmatch(idempotency_key or "")
    return datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) if found else None


MAX_NOTE = 1000  # characters of a progress note (pgsched.report_progress refuses more)
MAX_STEP_NAME = 200  # characters of a step name (pgsched.record_step refuses more)


class JobState(StrEnum):
    """The states of pgsched.job_state, in lifecycle order."""

    SCHEDULED = "scheduled"
    WAITING = "waiting"  # for its dependencies
    AVAILABLE = "available"
    RUNNING = "running"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"


# The states a job waits or runs in (pgsched.jobs), and those it ends in (pgsched.job_history).
ACTIVE_STATES = (JobState.SCHEDULED.value, JobState.WAITING.value, JobState.AVAILABLE.value, JobState.RUNNING.value)
TERMINAL_STATES = (JobState.COMPLETED.value, JobState.DEAD.value, JobState.CANCELLED.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedJob:
    """One row returned by pgsched.claim(): a job leased to this worker under lease_token."""

    id: int
    shard: int
    queue: str
    task: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_token: int
    idempotency_key: str | None
    run_at: datetime
    priority: int
    tenant: str | None
    created_at: datetime
    lease_expires_at: datetime | None = None  # claimed at = lease_expires_at - lease (the database's clock)
    trace_context: dict[str, Any] | None = None  # the enqueuer's trace headers (pgsched.observe.otel)


class Journal(Protocol):
    """Where a run's progress and durable steps go: the worker's (pgsched.runtime.journal), or none."""

    def progress(self, ctx: JobContext) -> None:
        """ctx has a new progress report to send (called once until the report is taken)."""

    def steps(self, ctx: JobContext) -> dict[str, Any]:
        """The results of ctx's job's recorded steps by name; raises LeaseLost when ctx no longer holds the job."""

    def record(self, ctx: JobContext, name: str, result: str) -> None:
        """Record a finished step's JSON result, fenced by ctx's token; raises LeaseLost when refused."""

    def settle(self, ctx: JobContext) -> None:
        """Send ctx's pending progress report now (its run ended: before its outcome is written)."""


@dataclass(frozen=True, slots=True)
class Dependency:
    """One dependency of a job, as its handler sees it (``ctx.dependencies``): where it is now, and its outcome.

    ``state`` is 'completed', 'dead' or 'cancelled' once it finished (a batch callback,
    ``on_dependency_failure='run'``, sees all three), else its active state; ``result`` is
    what a completed one returned, ``error`` why one failed or was cancelled.
    """

    id: int
    state: str
    result: Any = None
    error: str | None = None


@dataclass(eq=False, kw_only=True)
class JobContext:
    """What a handler can know about the run it is doing, and how it learns to stop.

    Ask for it by annotating a handler parameter with ``JobContext`` (or by
    ``pgsched.current_job()``). ``lease_token`` is the fencing token: pass it
    (with ``idempotency_key``) to outside systems so they can reject a stale
    or repeated run.

    Three reasons to stop, one check: ``should_stop`` is true once a user
    cancelled the job (``cancel_requested``), its worker is shutting down
    (``stopping``), or its lease was lost (``lease_lost``). The worker, not
    the return value, decides what a stopped run means: after a cancel the
    job ends ``cancelled``; after the stop signal it is handed back to run
    again (never recorded completed); after a lost lease nothing is written.
    """

    job: ClaimedJob
    worker: str
    # Plain flags (a worker makes thousands of contexts a second); the event
    # that wakes sleep() is made only when a handler sleeps.
    _cancelled: bool = field(default=False, repr=False)
    _stopping: bool = field(default=False, repr=False)
    _lost: bool = field(default=False, repr=False)
    # its start is recorded already, by the claim; _stamped_at: the monotonic time it began to wait for a slot
    _stamped: bool = field(default=False, repr=False)
    _stamped_at: float = field(default=0.0, repr=False)
    # seconds it had been due when claimed (the database's clock), and the monotonic time of the claim
    _due_at_claim: tuple[float, float] | None = field(default=None, repr=False)
    _waker: threading.Event | None = field(default=None, repr=False)
    _started: float = field(default=0.0, repr=False)  # perf_counter() when the handler was called (0: never)
    _timed_out: bool = field(default=False, repr=False)
    # Seconds this run may take (the job's timeout, else its task's), as start() said; None: none recorded.
    timeout: float | None = None
    _journal: Journal | None = field(default=None, repr=False)
    _progress: tuple[float, str | None] | None = field(default=None, repr=False)  # the last report
    _progress_pending: bool = field(default=False, repr=False)  # told to the journal, not yet taken
    _steps: dict[str, Any] | None = field(default=None, repr=False)  # recorded step results, once loaded
    # Reads a job's dependencies from the database, given its id (set by whatever runs the job, one for all
    # its jobs); None: nothing to read with.
    _load_dependencies: Callable[[int], tuple[Dependency, ...]] | None = field(default=None, repr=False)
    _dependencies: tuple[Dependency, ...] | None = field(default=None, repr=False)

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def task(self) -> str:
        return self.job.task

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def max_attempts(self) -> int:
        return self.job.max_attempts

    @property
    def lease_token(self) -> int:
        return self.job.lease_token

    @property
    def idempotency_key(self) -> str | None:
        return self.job.idempotency_key

    @property
    def scheduled_at(self) -> datetime:
        """When this run was due (UTC, the database's clock): for an occurrence of a recurring schedule,
        its fire time, on every run (also after a retry, a snooze or a hand-back); else the job's run_at."""
        return fire_time(self.job.idempotency_key) or self.job.run_at

    @property
    def args(self) -> dict[str, Any]:
        return self.job.args

    @property
    def dependencies(self) -> tuple[Dependency, ...]:
        """The jobs this one was enqueued to depend on, in id order, each with its state and result or error.

        Read from the database the first time it is asked for (once per run); empty for a
        job without dependencies. A dependency of another tenant is left out.
        """
        if self._dependencies is None:
            if self._load_dependencies is None:
                raise RuntimeError(f"job {self.id}: its dependencies cannot be read here (no database at hand)")
            self._dependencies = self._load_dependencies(self.job.id)
        return self._dependencies

    @property
    def cancel_requested(self) -> bool:
        """True once a user cancelled this job (pgsched.cancel()); returning then ends the job ``cancelled``."""
        return self._cancelled

    @property
    def stopping(self) -> bool:
        """True once the worker is shutting down and wants this run to end: the job is handed back, not completed."""
        return self._stopping

    @property
    def should_stop(self) -> bool:
        """True once the handler should return soon: cancelled, its worker stopping, or its lease lost."""
        return self._cancelled or self._stopping or self._lost or self._timed_out

    @property
    def timed_out(self) -> bool:
        """True once this run overran its timeout: the job was failed already, whatever this run does next."""
        return self._timed_out

    @property
    def lease_lost(self) -> bool:
        """True once another run may own this job: whatever this run returns is discarded."""
        return self._lost

    def raise_if_cancelled(self) -> None:
        """Raise when the handler should stop now: LeaseLost, JobCancelled, or WorkerStopping."""
        if self._lost:
            raise LeaseLost(f"job {self.id}: lease lost (token {self.lease_token} is stale)")
        if self._timed_out:
            raise LeaseLost(f"job {self.id}: timed out; the job was failed and this run's result is discarded")
        if self._cancelled:
            raise JobCancelled(f"job {self.id}: cancellation requested")
        if self._stopping:
            raise WorkerStopping(f"job {self.id}: the worker is stopping; the job will run again")

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; returns True early when the handler should stop (see ``should_stop``)."""
        waker = self._waker
        if waker is None:
            with _WAKER_LOCK:
                if self._waker is None:
                    self._waker = threading.Event()
                waker = self._waker
        if self.should_stop:  # set before the event existed
            return True
        return waker.wait(seconds)

    # -- progress and durable steps (docs/steps.md) ------------------------

    def progress(self, fraction: float, note: str | None = None) -> None:
        """Say how far this run is: ``fraction`` from 0 to 1, and an optional note of up to 1000 characters.

        Never blocks, in sync and async handlers alike: the report is kept
        here, and the worker writes the latest one of each job at most once a
        second, fenced by the lease token (a stale run's reports are dropped).
        """
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise TypeError(f"progress fraction must be a number from 0 to 1, not {type(fraction).__name__}")
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            raise ValueError(f"progress fraction must be from 0 to 1, not {fraction!r}")
        if note is not None and not isinstance(note, str):
            raise TypeError(f"progress note must be a string or None, not {type(note).__name__}")
        if note is not None and len(note) > MAX_NOTE:
            raise ValueError(f"progress note must be at most {MAX_NOTE} characters, not {len(note)}")
        self._progress = (float(fraction), None if note is None else note.replace("\x00", "\ufffd"))
        journal = self._journal
        if journal is not None and not self._progress_pending:
            self._progress_pending = True
            journal.progress(self)

    @property
    def last_progress(self) -> tuple[float, str | None] | None:
        """The last ``progress()`` report of this run: (fraction, note), or None."""
        return self._progress

    def _take_progress(self) -> tuple[float, str | None] | None:
        """The report to send now (the journal's side): clears the pending mark first, then reads."""
        self._progress_pending = False
        return self._progress

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this job, durably: its JSON result is recorded under ``name``.

        When the job runs again (a retry, an expired lease, a hand-back), a
        step recorded already returns its recorded result without calling
        ``fn``. The result is recorded fenced by the lease token in its own
        short transaction: a run that lost its lease gets LeaseLost instead.
        The value returned is the JSON round trip of fn's (the same on the
        first run and on a replay). ``fn`` must be a plain function here; use
        ``await ctx.step_async(...)`` in coroutine handlers.
        """
        recorded = self._recorded_steps(name)
        if name in recorded:
            return recorded[name]
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise TypeError(f"step {name!r}: {fn!r} returned an awaitable; use await ctx.step_async() for it")
        return self._record_step(name, value)

    async def step_async(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``step()`` for coroutine handlers: ``fn`` may be a plain or an ``async def`` function.

        The database round trips run on a thread, so the event loop never waits for them.
        """
        _check_step_name(name)
        if self._steps is None:
            await asyncio.to_thread(self._recorded_steps, name)
        assert self._steps is not None
        if name in self._steps:
            return self._steps[name]
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        text = _step_json(name, value)
        await asyncio.to_thread(self._store_step, name, text)
        return self._steps[name]

    def _recorded_steps(self, name: str) -> dict[str, Any]:
        _check_step_name(name)
        if self._lost:
            raise LeaseLost(f"job {self.id}: lease lost (token {self.lease_token} is stale)")
        if self._steps is None:
            if self._journal is None:
                raise RuntimeError("durable steps need a database: run this handler through a worker or app.drain()")
            self._steps = self._journal.steps(self)
        return self._steps

    def _record_step(self, name: str, value: Any) -> Any:
        self._store_step(name, _step_json(name, value))
        assert self._steps is not None
        return self._steps[name]

    def _store_step(self, name: str, text: str) -> None:
        assert self._journal is not None
        assert self._steps is not None
        self._journal.record(self, name, text)
        self._steps[name] = json.loads(text)

    def _request_cancel(self) -> None:
        self._cancelled = True
        self._wake()

    def _request_stop(self) -> None:
        self._stopping = True
        self._wake()

    def _mark_timed_out(self) -> None:
        self._timed_out = True
        self._wake()

    def _mark_lease_lost(self) -> None:
        self._lost = True
        self._wake()

    def _wake(self) -> None:
        with _WAKER_LOCK:
            waker = self._waker
        if waker is not None:
            waker.set()


_WAKER_LOCK = threading.Lock()


def _check_step_name(name: str) -> None:
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_STEP_NAME:
        raise ValueError(f"a step name must be a string of 1 to {MAX_STEP_NAME} characters, not {name!r}")


def _step_json(name: str, value: Any) -> str:
    try:
        return to_json(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"step {name!r}: its result must be JSON (dicts, lists, str, numbers, bool, None): {exc}"
        ) from exc


_current: ContextVar[JobContext | None] = ContextVar("pgsched_current_job", default=None)


def current_job() -> JobContext:
    """The context of the job running in this thread or task; raises LookupError outside a handler."""
    ctx = _current.get()
    if ctx is None:
        raise LookupError("no pgsched job is running here")
    return ctx
