"""What a worker does with the rows a claim returned: their contexts, and the jobs it hands back."""

from __future__ import annotations

import logging
import time
from dataclasses import fields
from typing import Any, Final

import psycopg

from pgsched.core.job import ClaimedJob, JobContext
from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting
from pgsched.observe.metrics import WorkerMetrics
from pgsched.runtime import dependencies
from pgsched.runtime.housekeeping import UNSERVED_CHECK_INTERVAL

log = logging.getLogger("pgsched.runtime.worker")  # the worker's lines


# A claim's row: ClaimedJob's fields in order, then what the claim said of its start, and the job's timeout
# (pgsched/db/sql/work.sql, claim_and_start).
CLAIMED_FIELDS: Final = tuple(f.name for f in fields(ClaimedJob))
# Each field's slot: a row's values go straight into them, in order (ClaimedJob is frozen, with slots; its
# keyword-only __init__, given the row as a dict, took half of a claimed job's time in this module).
_SLOTS: Final = tuple(getattr(ClaimedJob, name) for name in CLAIMED_FIELDS)
_new = object.__new__


def claimed_row(row: tuple[Any, ...]) -> tuple[ClaimedJob, str | None, float | None]:
    """A claim_and_start row as (job, what its start was, its timeout in seconds)."""
    job = _new(ClaimedJob)
    for slot, value in zip(_SLOTS, row, strict=False):
        slot.__set__(job, value)
    return job, row[-2], row[-1]


def job_context(
    job: ClaimedJob, worker: str, started: str | None, timeout: float | None, load: dependencies.Loader | None
) -> JobContext:
    """A claimed job's context; ``started``: what the claim's pgsched.start() said, if it recorded the start."""
    ctx = JobContext(job=job, worker=worker, timeout=timeout, _load_dependencies=load)
    if started == "started":
        ctx._stamped = True
    elif started == "cancel_requested":
        ctx._request_cancel()
    elif started == "lease_lost":
        ctx._mark_lease_lost()
    return ctx


class PassOver:
    """Hands back jobs of tasks this worker does not know, for a worker that knows them (pgsched.pass_over):
    their attempt is given back; the database sends one dead only once no live worker has registered its task
    for pgsched.config.unserved_task_timeout."""

    def __init__(self, metrics: WorkerMetrics, counts: dict[str, int]) -> None:
        self.metrics = metrics
        self.counts = counts
        self._said: dict[str, float] = {}  # task -> when to warn again about passing its jobs over

    def hand_back(self, claim_db: Reconnecting, jobs: list[ClaimedJob]) -> None:
        ids = [job.id for job in jobs]
        tokens = [job.lease_token for job in jobs]
        try:
            rows = claim_db.call(lambda c: c.execute(queries.PASS_OVER, (ids, tokens)).fetchall())
        except psycopg.Error as exc:
            log.error("could not hand back %d jobs of unknown tasks (%s); their leases will expire", len(ids), exc)
            return
        outcomes = dict(rows)
        for job in jobs:
            outcome = outcomes.get(job.id, "lease_lost")
            extra = {"job_id": job.id, "task": job.task, "queue": job.queue}
            self.metrics.count(job.queue, job.task, "dead" if outcome == "dead" else "passed_over")
            if outcome == "dead":
                self.counts["dead"] += 1
                log.error(
                    "job %s is dead: no live worker has registered its task %r for the unserved task timeout",
                    job.id,
                    job.task,
                    extra=extra,
                )
            else:
                self.counts["passed_over"] += 1
                now = time.monotonic()
                loud = now >= self._said.get(job.task, 0.0)
                if loud:  # once per task per UNSERVED_CHECK_INTERVAL: it may come back every second
                    self._said[job.task] = now + UNSERVED_CHECK_INTERVAL
                log.log(
                    logging.WARNING if loud else logging.DEBUG,
                    "job %s: task %r is not registered in this worker; handed back (%s) for a worker that knows it",
                    job.id,
                    job.task,
                    outcome,
                    extra=extra,
                )
