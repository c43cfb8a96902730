"""The pgsched exception tree, and the mapping from database errors into it.

::

    PgschedError
    ├── ConfigurationError        bad settings, no DSN and no embedded server, unknown app
    ├── DatabaseError             the database refused or could not be reached
    │   ├── InvalidJob            a job was refused: the message names the constraint
    │   └── SchemaError           pgsched is not installed, or not at the expected version
    ├── TaskError
    │   ├── TaskNotRegistered     no handler registered under that task name
    │   └── TaskAlreadyRegistered two handlers for one task name
    └── JobError
        ├── JobNotFound
        └── LeaseLost             the lease moved on (expired, taken over); results are discarded

Handlers may raise these to steer their job:

    Retry(delay)   fail this attempt and retry after delay (counts an attempt)
    Snooze(delay)  put the job back to run after delay (no failure counted)
    GiveUp(reason) fail the job for good: it goes to the dead letters at once
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

    def __init__(self, message: str, *, constraint: str | None = None, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.constraint = constraint
        self.code = sqlstate


class InvalidJob(DatabaseError):
    """A job was refused by a named constraint; nothing was enqueued."""


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


# SQLSTATE classes that mean "this input was refused".
_INVALID_INPUT = {"23514", "23502", "22P02", "22023", "22007", "22008", "22003", "42501"}


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
    if state in _INVALID_INPUT:
        return InvalidJob(message, constraint=diag.constraint_name, sqlstate=state)
    return DatabaseError(message, constraint=diag.constraint_name, sqlstate=state)
