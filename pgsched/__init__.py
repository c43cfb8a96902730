"""pgsched: a distributed job queue and scheduler in which PostgreSQL is the scheduler."""

from __future__ import annotations

from pgsched.api.app import App
from pgsched.core.event import Event
from pgsched.core.handle import JobHandle, JobStatus, Progress
from pgsched.core.job import ClaimedJob, Dependency, JobContext, JobState, current_job
from pgsched.core.task import JobSpec, Ref, Task
from pgsched.core.version import VERSION
from pgsched.errors import (
    ConfigurationError,
    DatabaseError,
    GiveUp,
    IdempotencyConflict,
    InvalidJob,
    JobCancelled,
    JobDead,
    JobError,
    JobFailed,
    JobNotFound,
    JobWasCancelled,
    LeaseLost,
    PgschedError,
    ReplaceRefused,
    ResultTimeout,
    Retry,
    RunFailed,
    SchemaError,
    Snooze,
    TaskAlreadyRegistered,
    TaskError,
    TaskNotRegistered,
    WorkerStopping,
)

__version__ = VERSION

__all__ = [
    "App",
    "ClaimedJob",
    "ConfigurationError",
    "DatabaseError",
    "Dependency",
    "Event",
    "GiveUp",
    "IdempotencyConflict",
    "InvalidJob",
    "JobCancelled",
    "JobContext",
    "JobDead",
    "JobError",
    "JobFailed",
    "JobHandle",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "JobStatus",
    "JobWasCancelled",
    "LeaseLost",
    "PgschedError",
    "Progress",
    "Ref",
    "ReplaceRefused",
    "ResultTimeout",
    "Retry",
    "RunFailed",
    "SchemaError",
    "Snooze",
    "Task",
    "TaskAlreadyRegistered",
    "TaskError",
    "TaskNotRegistered",
    "WorkerStopping",
    "current_job",
]
