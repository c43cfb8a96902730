"""The pgsched exception tree, and the mapping from database errors into it.

::

    PgschedError
    ├── ConfigurationError        bad settings, no DSN and no embedded server, unknown app
    ├── DatabaseError             the database refused or could not be reached
    │   ├── InvalidJob            a job was refused: the message names the value, column and rule
    │   │   ├── IdempotencyConflict  a repeated idempotency key with another task or other args (PS422)
    │   │   └── ReplaceRefused     on_conflict='replace' of a job that already started or ended (PS423)
    │   └── SchemaError           pgsched is not installed, or not at the expected version
    ├── TaskError
    │   ├── TaskNotRegistered     no handler registered under that task name
    │   └── TaskAlreadyRegistered two handlers for one task name
    └── JobError
        ├── JobNotFound
        ├── LeaseLost             the lease moved on (expired, taken over); results are discarded
        ├── JobFailed             JobHandle.wait(): the job ended without a result
        │   ├── JobDead           dead: attempts used up, gave up, unknown task (.error says why)
        │   └── JobWasCancelled   cancelled
        └── ResultTimeout         JobHandle.wait(): not finished in time (also a TimeoutError)

Handlers may raise these to steer their job:

    Retry(delay)   fail this attempt and retry after delay (counts an attempt)
    Snooze(delay)  put the job back to run after delay (no failure counted)
    GiveUp(reason) fail the job for good: it goes to the dead letters at once
    RunFailed(reason, result)  fail this attempt (retried by policy), recording result with it
    JobCancelled   raised by ``JobContext.raise_if_cancelled()`` after pgsched.cancel(): the job ends cancelled
    WorkerStopping raised by it when the worker shuts down: the job is handed back and runs again
"""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

import psycopg
import psycopg.errors


class PgschedError(Exception):
    """Base class of every error pgsched raises."""


class ConfigurationError(PgschedError):
    """Settings are missing or wrong."""


class DatabaseError(PgschedError):
    """The database refused a statement or could not be reached."""

    sqlstate: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        constraint: str | None = None,
        sqlstate: str | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message)
        self.constraint = constraint
        self.code = sqlstate
        self.column = column


class InvalidJob(DatabaseError):
    """A job was refused by a named rule; nothing was enqueued (in a batch: nothing of the batch)."""


class IdempotencyConflict(InvalidJob):
    """The idempotency key is held by a job of another task or with other args (SQLSTATE PS422)."""


class ReplaceRefused(InvalidJob):
    """on_conflict='replace' found the key's job started (running) or ended; nothing changed (SQLSTATE PS423)."""


class SchemaError(DatabaseError):
    """The pgsched schema is missing or at another version."""


class TaskError(PgschedError):
    """A problem with task registration or lookup."""


class TaskNotRegistered(TaskError):
    """No handler is registered under this task name."""


class TaskAlreadyRegistered(TaskError):
    """A handler is already registered under this task name."""


class JobError(PgschedError):
    """A problem with one job."""


class JobNotFound(JobError):
    """No job has this id."""


class LeaseLost(JobError):
    """The job's lease was lost: its fencing token is no longer current."""


class JobFailed(JobError):
    """The job a caller waited for ended without a result (see JobHandle.wait)."""

    def __init__(self, message: str, *, job_id: int, state: str, error: str | None, attempt: int) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.state = state
        self.error = error
        self.attempt = attempt


class JobDead(JobFailed):
    """The job went dead: its attempts were used up, its handler gave up, or its task is unknown."""


class JobWasCancelled(JobFailed):
    """The job was cancelled."""


class ResultTimeout(JobError, TimeoutError):
    """The job did not finish within the time waited (it may still finish later)."""


class JobCancelled(PgschedError):
    """Cancellation of the running job was requested: raising it (or returning) ends the job cancelled."""


class WorkerStopping(PgschedError):
    """The worker is shutting down: the job is handed back to run again, whatever the handler does next."""


class Retry(Exception):
    """Raise from a handler to retry the job after ``delay`` (this attempt counts)."""

    def __init__(self, delay: timedelta | float = 0.0, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)
        self.reason = reason


class Snooze(Exception):
    """Raise from a handler to run the job again after ``delay`` without counting a failure."""

    def __init__(self, delay: timedelta | float) -> None:
        super().__init__(f"snoozed for {delay}")
        self.delay = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)


class GiveUp(Exception):
    """Raise from a handler to fail the job for good (it goes to the dead letters)."""


class RunFailed(Exception):
    """Raise from a handler to fail this attempt with ``reason``, keeping ``result`` (JSON) with it.

    The attempt is retried by the task's policy like any failure; the result is
    stored with the attempt's 'failed' event, and in the history row when the
    job ends (dead, or cancelled). Command jobs raise it for a non-zero exit.
    """

    def __init__(self, reason: str, result: object = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.result = result


# SQLSTATE classes that mean "this input was refused".
_INVALID_INPUT = {"23514", "23502", "23503", "22P02", "22023", "22007", "22008", "22003", "42501"}
IDEMPOTENCY_CONFLICT = "PS422"
REPLACE_REFUSED = "PS423"

# What each rule of pgsched.jobs asks, for errors PostgreSQL itself raised
# (they name a partition, "jobs_s2", and not the value): the CHECK left on the
# table. A job's values are checked by pgsched's functions and its insert
# trigger, which name the rule and the value themselves.
_JOB_RULES = {
    "jobs_state_valid": "a job is scheduled, available, or running with a lease",
}


def from_psycopg(exc: psycopg.Error) -> PgschedError:
    """Translate a psycopg error into the pgsched tree (the caller raises it ``from`` exc)."""
    diag = exc.diag
    state = exc.sqlstate
    message = diag.message_primary or str(exc)
    # "Failing row contains (...)" repeats the whole row: noise next to the constraint's name.
    if diag.message_detail and not diag.message_detail.startswith("Failing row contains"):
        message = f"{message} ({diag.message_detail})"
    if isinstance(
        exc, psycopg.errors.UndefinedFunction | psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName
    ):
        return SchemaError(
            f"{message}. Is pgsched installed here? Run `pgsched migrate`.",
            sqlstate=state,
        )
    constraint, column = diag.constraint_name, diag.column_name
    if state == IDEMPOTENCY_CONFLICT:
        return IdempotencyConflict(message, constraint=constraint, sqlstate=state, column=column)
    if state == REPLACE_REFUSED:
        return ReplaceRefused(message, constraint=constraint, sqlstate=state, column=column)
    if state in _INVALID_INPUT:
        if not message.startswith("pgsched:") and constraint in _JOB_RULES:
            message = f"pgsched: job refused by {constraint}: {_JOB_RULES[constraint]}"
        return InvalidJob(message, constraint=constraint, sqlstate=state, column=column)
    return DatabaseError(message, constraint=constraint, sqlstate=state, column=column)
