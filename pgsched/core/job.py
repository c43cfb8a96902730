"""Jobs as the worker sees them: the claimed row, the handler's context, and job states."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pgsched.errors import JobCancelled, LeaseLost, WorkerStopping


class JobState(StrEnum):
    """The states of pgsched.job_state, in lifecycle order."""

    SCHEDULED = "scheduled"
    WAITING = "waiting"  # for its dependencies
    AVAILABLE = "available"
    RUNNING = "running"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"


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
    _stamped: bool = field(default=False, repr=False)  # its start is recorded already (claimed into a free slot)
    # seconds it had been due when claimed (the database's clock), and the monotonic time of the claim
    _due_at_claim: tuple[float, float] | None = field(default=None, repr=False)
    _waker: threading.Event | None = field(default=None, repr=False)
    _started: float = field(default=0.0, repr=False)  # perf_counter() when the handler was called (0: never)
    _timed_out: bool = field(default=False, repr=False)
    # Seconds this run may take (the job's timeout, else its task's), as start() said; None: none recorded.
    timeout: float | None = None
    # Reads the job's dependencies from the database (set by whatever runs the job); None: nothing to read with.
    _load_dependencies: Callable[[], tuple[Dependency, ...]] | None = field(default=None, repr=False)
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
        """When this attempt was due (UTC, the database's clock)."""
        return self.job.run_at

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
            self._dependencies = self._load_dependencies()
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

_current: ContextVar[JobContext | None] = ContextVar("pgsched_current_job", default=None)


def current_job() -> JobContext:
    """The context of the job running in this thread or task; raises LookupError outside a handler."""
    ctx = _current.get()
    if ctx is None:
        raise LookupError("no pgsched job is running here")
    return ctx
