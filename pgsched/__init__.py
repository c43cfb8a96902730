"""pgsched: a distributed job queue and scheduler in which PostgreSQL is the scheduler."""

from __future__ import annotations

from pgsched.app import App
from pgsched.errors import (
    ConfigurationError,
    DatabaseError,
    GiveUp,
    InvalidJob,
    JobCancelled,
    JobError,
    JobNotFound,
    LeaseLost,
    PgschedError,
    Retry,
    SchemaError,
    Snooze,
    TaskAlreadyRegistered,
    TaskError,
    TaskNotRegistered,
    WorkerStopping,
)
from pgsched.job import ClaimedJob, JobContext, JobState, current_job
from pgsched.task import JobSpec, Task

__version__ = "0.1.0"

__all__ = [
    "App",
    "ClaimedJob",
    "ConfigurationError",
    "DatabaseError",
    "GiveUp",
    "InvalidJob",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "LeaseLost",
    "PgschedError",
    "Retry",
    "SchemaError",
    "Snooze",
    "Task",
    "TaskAlreadyRegistered",
    "TaskError",
    "TaskNotRegistered",
    "WorkerStopping",
    "current_job",
]
