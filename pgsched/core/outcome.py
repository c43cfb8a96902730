"""What a finished run asks the database to do with its job."""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from pgsched.core.job import ClaimedJob, to_json
from pgsched.errors import GiveUp, JobCancelled, LeaseLost, Retry, RunFailed, Snooze

log = logging.getLogger(__name__)


class Kind(StrEnum):
    COMPLETE = "complete"  # pgsched.complete()
    FAIL = "fail"  # pgsched.fail(): retry with backoff, or dead when attempts are used up
    RETRY_AT = "retry_at"  # pgsched.fail(retry_at => now() + delay)
    DEAD = "dead"  # pgsched.fail(final => true)
    SNOOZE = "snooze"  # pgsched.snooze()
    DISCARD = "discard"  # the lease is gone: write nothing


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one run of one job."""

    job: ClaimedJob
    kind: Kind
    result: str | None = None  # JSON text: COMPLETE's result, or what a failed run recorded (RunFailed)
    error: str | None = None
    delay: timedelta | None = None  # RETRY_AT / SNOOZE: added to the database's clock
    exception: BaseException | None = field(default=None, compare=False, repr=False)  # what the handler raised


def success(job: ClaimedJob, value: Any) -> Outcome:
    """A handler returned value: store it as the job's result when JSON can carry it."""
    return Outcome(job, Kind.COMPLETE, result=_result_json(job, value))


def _result_json(job: ClaimedJob, value: Any) -> str | None:
    if value is None:
        return None
    try:
        return to_json(value)
    except (TypeError, ValueError) as exc:
        log.warning(
            "job %s: result is not JSON-serializable (%s); storing none",
            job.id,
            exc,
            extra={"job_id": job.id, "task": job.task},
        )
        return None


def timed_out(job: ClaimedJob, seconds: float) -> Outcome:
    """A run that overran its timeout: a failure, retried by the job's policy (the same words the database uses)."""
    return Outcome(job, Kind.FAIL, error=f"timed out after {format_seconds(seconds)} s")


def format_seconds(seconds: float) -> str:
    """2.0 -> '2', 0.5 -> '0.5': as pgsched._fail_overdue prints a timeout (milliseconds at most)."""
    return f"{round(seconds, 3):.3f}".rstrip("0").rstrip(".")


def from_exception(job: ClaimedJob, exc: BaseException) -> Outcome:
    """Map what a handler raised to the transition it asks for (the exception kept for tracing)."""
    outcome = _from_exception(job, exc)
    return Outcome(outcome.job, outcome.kind, outcome.result, outcome.error, outcome.delay, exc)


def _from_exception(job: ClaimedJob, exc: BaseException) -> Outcome:
    if isinstance(exc, LeaseLost):
        return Outcome(job, Kind.DISCARD, error=str(exc))
    if isinstance(exc, Retry):
        return Outcome(job, Kind.RETRY_AT, error=exc.reason, delay=exc.delay)
    if isinstance(exc, Snooze):
        return Outcome(job, Kind.SNOOZE, delay=exc.delay)
    if isinstance(exc, GiveUp):
        return Outcome(job, Kind.DEAD, error=f"gave up: {exc}")
    if isinstance(exc, RunFailed):
        # A failed attempt that says what it saw (a command's exit code and output).
        return Outcome(job, Kind.FAIL, error=exc.reason, result=_result_json(job, exc.result))
    if isinstance(exc, JobCancelled):
        # The database turns a failure of a cancel-requested job into 'cancelled'.
        return Outcome(job, Kind.FAIL, error=f"cancelled: {exc}")
    text = "".join(traceback.format_exception(exc)).strip()
    return Outcome(job, Kind.FAIL, error=text[-20000:])
