"""Job handles: the id enqueue returns, which can also tell the job's state and wait for its result."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import psycopg
from psycopg.rows import tuple_row

from pgsched.core.event import CHANNEL, parse_payload
from pgsched.core.job import JobState
from pgsched.db import queries
from pgsched.db.translate import translated
from pgsched.errors import JobDead, JobNotFound, JobWasCancelled, ResultTimeout


class JobSource(Protocol):
    """What a handle looks its job up through (the App): its DSN, and its own connection for one statement."""

    @property
    def dsn(self) -> str: ...

    def _run(self, conn: psycopg.Connection[Any] | None, query: Any, params: Sequence[Any]) -> list[Any]: ...


TERMINAL = frozenset({JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED})


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStatus:
    """Where a job stands: its active row, else its latest history row."""

    id: int
    state: JobState
    queue: str
    task: str
    attempt: int
    max_attempts: int | None
    result: Any = None
    error: str | None = None
    finished_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """A job's last progress report (``ctx.progress``): how far, a note, and when (the database's clock)."""

    fraction: float
    note: str | None
    at: datetime


class JobHandle(int):
    """A job id (it is the ``int`` enqueue always returned) that knows its App.

    ``status()`` and ``state()`` look the job up, ``progress()`` its last progress report; ``wait(timeout)`` and
    ``await wait_async(timeout)`` return its result once it completed,
    woken by its status event on pgsched_events and checking every
    ``poll_interval`` seconds whatever happens (events may be off).
    """

    app: JobSource

    def __new__(cls, job_id: int, app: JobSource) -> JobHandle:
        handle = super().__new__(cls, job_id)
        handle.app = app
        return handle

    def __reduce__(self) -> tuple[type[int], tuple[int]]:
        return int, (int(self),)  # pickles (and travels) as the plain id

    @property
    def id(self) -> int:
        return int(self)

    def status(self, conn: psycopg.Connection[Any] | None = None) -> JobStatus:
        """The job's state, attempt, and (once finished) result or error; raises JobNotFound."""
        rows = self.app._run(conn, queries.JOB_STATUS, (self.id,))
        return self._status_from(rows)

    def state(self, conn: psycopg.Connection[Any] | None = None) -> JobState:
        return self.status(conn).state

    def progress(self, conn: psycopg.Connection[Any] | None = None) -> Progress | None:
        """The job's last progress report (kept when it finished too), or None if it made none; raises JobNotFound."""
        rows = self.app._run(conn, queries.JOB_PROGRESS, (self.id,))
        if not rows:
            self._status_from(rows)  # raises JobNotFound
        fraction, note, at, _steps = rows[0]
        return None if fraction is None else Progress(fraction=fraction, note=note, at=at)

    def _status_from(self, rows: list[Any]) -> JobStatus:
        if not rows:
            raise JobNotFound(
                f"job {self.id} is not visible: not committed yet, rolled back, or its history was pruned"
            )
        state, queue, task, attempt, max_attempts, result, error, finished_at = rows[0]
        return JobStatus(
            id=self.id,
            state=JobState(state),
            queue=queue,
            task=task,
            attempt=attempt,
            max_attempts=max_attempts,
            result=result,
            error=error,
            finished_at=finished_at,
        )

    def _outcome(self, status: JobStatus) -> Any:
        if status.state is JobState.COMPLETED:
            return status.result
        last = (status.error or "").strip().splitlines()
        reason = last[-1] if last else "no error recorded"
        kind = JobDead if status.state is JobState.DEAD else JobWasCancelled
        raise kind(
            f"job {self.id} ({status.task}) is {status.state} after attempt {status.attempt}: {reason}",
            job_id=self.id,
            state=str(status.state),
            error=status.error,
            attempt=status.attempt,
        )

    def _timeout(self, timeout: float | None, status: JobStatus) -> ResultTimeout:
        return ResultTimeout(f"job {self.id} ({status.task}) is still {status.state} after {timeout}s")

    def wait(self, timeout: float | None = None, *, poll_interval: float = 5.0) -> Any:
        """Block until the job finished; return its result (the handler's return value, as JSON gave it back).

        Raises ResultTimeout after ``timeout`` seconds (None waits for ever),
        JobDead (with ``.error``) or JobWasCancelled when it ended so, and
        JobNotFound for an id that is not visible (an enqueue not committed
        yet). Holds a connection of its own while it waits.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with translated(), psycopg.connect(self.app.dsn, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            while True:
                with conn.cursor(row_factory=tuple_row) as cur:
                    status = self._status_from(cur.execute(queries.JOB_STATUS, (self.id,)).fetchall())
                if status.finished:
                    return self._outcome(status)
                left = poll_interval if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise self._timeout(timeout, status)
                for note in conn.notifies(timeout=min(poll_interval, left)):
                    event = parse_payload(note.payload)
                    if event is not None and event.id == self.id:
                        break

    async def wait_async(self, timeout: float | None = None, *, poll_interval: float = 5.0) -> Any:
        """``wait()`` for asyncio code: the same result and errors, on an async connection of its own."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        with translated():
            async with await psycopg.AsyncConnection.connect(self.app.dsn, autocommit=True) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                while True:
                    async with conn.cursor(row_factory=tuple_row) as cur:
                        await cur.execute(queries.JOB_STATUS, (self.id,))
                        status = self._status_from(await cur.fetchall())
                    if status.finished:
                        return self._outcome(status)
                    left = poll_interval if deadline is None else deadline - loop.time()
                    if left <= 0:
                        raise self._timeout(timeout, status)
                    async for note in conn.notifies(timeout=min(poll_interval, left)):
                        event = parse_payload(note.payload)
                        if event is not None and event.id == self.id:
                            break
