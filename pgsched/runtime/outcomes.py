"""What a worker records of an outcome once the database wrote it: its counts, the metrics, a log line."""

from __future__ import annotations

import logging

from pgsched.core.outcome import Kind, Outcome
from pgsched.observe.metrics import WorkerMetrics

log = logging.getLogger("pgsched.runtime.worker")  # the worker's lines

_OUTCOMES = {"completed": "completed", "lease_lost": "lost", "dead": "dead", "cancelled": "cancelled"}


def record_written(metrics: WorkerMetrics, counts: dict[str, int], outcome: Outcome, state: str) -> None:
    """``state``: what the database made of the outcome (completed, lease_lost, dead, cancelled, or a retry)."""
    job = outcome.job
    extra = {"job_id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempt}
    metrics.count(job.queue, job.task, _OUTCOMES.get(state) or _retry_outcome(outcome))
    if state == "completed":
        counts["completed"] += 1
    elif state == "lease_lost":
        counts["lost"] += 1
        log.warning(
            "job %s: outcome %s rejected, the lease had moved on (stale token %s)",
            job.id,
            outcome.kind,
            job.lease_token,
            extra=extra,
        )
    elif state == "dead":
        counts["dead"] += 1
        log.error(
            "job %s (%s) is dead after attempt %s: %s",
            job.id,
            job.task,
            job.attempt,
            _first_line(outcome.error),
            extra=extra,
        )
    elif state == "cancelled":
        counts["cancelled"] += 1
        log.info("job %s cancelled", job.id, extra=extra)
    elif outcome.kind is Kind.SNOOZE:
        counts["snoozed"] += 1
        log.info("job %s (%s) snoozed for %s", job.id, job.task, outcome.delay, extra=extra)
    else:
        counts["failed"] += 1
        log.warning(
            "job %s (%s) failed attempt %s, will retry (%s): %s",
            job.id,
            job.task,
            job.attempt,
            state,
            _first_line(outcome.error),
            extra=extra,
        )


def _retry_outcome(outcome: Outcome) -> str:
    return "snoozed" if outcome.kind is Kind.SNOOZE else "retried"


def _first_line(text: str | None) -> str:
    if not text:
        return ""
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""
