"""The jobs a worker holds, from its claim until their outcome is handed to the completer, and what becomes of each.

The executor hands every outcome here (``settle``, on the handler's thread):
the run's verdict is corrected for what happened meanwhile (a lost lease, a
cancel request, a shutdown's stop) and goes straight to the completer. The
heartbeater asks which leases to keep (``leases``) and reports those lost
(``lose``); the listener and the heartbeater report cancel requests
(``cancel``). The worker itself hears only that a slot is free (``on_free``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pgsched.core.job import JobContext
from pgsched.core.outcome import Kind, Outcome
from pgsched.observe.metrics import WorkerMetrics
from pgsched.runtime.completer import Completer

log = logging.getLogger("pgsched.runtime.worker")  # the worker's lines


def _no_interrupt(_job_id: int) -> None:
    return None


def corrected(ctx: JobContext, outcome: Outcome) -> Outcome | None:
    """What to write for a finished run: ``outcome`` corrected for what happened while it ran.

    None: shutdown asked the run to stop; whatever it returned or raised then, it was cut short, so the job is
    handed back without spending an attempt (never recorded completed).
    """
    if ctx.lease_lost and outcome.kind is not Kind.DISCARD:
        log.warning(
            "job %s finished after its lease was lost; result discarded (token %s is stale)",
            ctx.id,
            ctx.lease_token,
            extra={"job_id": ctx.id, "task": ctx.task},
        )
        return Outcome(ctx.job, Kind.DISCARD)
    if ctx.stopping and outcome.kind is not Kind.DISCARD:
        return None
    if ctx.cancel_requested and outcome.kind is Kind.COMPLETE:
        # Returning after a cancel request acknowledges it: fail() records a
        # cancel-requested job as cancelled (fenced by its token).
        return Outcome(
            ctx.job,
            Kind.FAIL,
            result=outcome.result,
            error="cancelled: the handler returned after the cancel request",
        )
    return outcome


class Held:
    """The worker's held jobs by id; ``on_free(held)`` is told, with how many remain, each time one is let go."""

    def __init__(self, metrics: WorkerMetrics, counts: dict[str, int], *, on_free: Callable[[int], None]) -> None:
        self._jobs: dict[int, JobContext] = {}
        self._stopped: list[JobContext] = []  # stopped when asked: hand back, do not fail
        self._lock = threading.Lock()
        self._metrics = metrics
        self._counts = counts
        self._on_free = on_free
        self.completer: Completer | None = None  # where outcomes go (set once its connection is open)
        self.interrupt: Callable[[int], None] = _no_interrupt  # the executor's cancel_async: stop a coroutine

    def __len__(self) -> int:
        return len(self._jobs)

    def get(self, job_id: int) -> JobContext | None:
        return self._jobs.get(job_id)

    def contexts(self) -> list[JobContext]:
        with self._lock:
            return list(self._jobs.values())

    def add(self, contexts: list[JobContext]) -> None:
        with self._lock:
            for ctx in contexts:
                self._jobs[ctx.id] = ctx

    def forget(self, contexts: list[JobContext]) -> None:
        """Let go of jobs that never started (the caller hands them back)."""
        with self._lock:
            for ctx in contexts:
                self._jobs.pop(ctx.id, None)

    # -- from the executor ----------------------------------------------

    def launched(self, contexts: list[JobContext]) -> None:
        """Observe the start lag of the handlers about to run: due until now, on the claim's clock."""
        now = time.monotonic()
        for ctx in contexts:
            if ctx._due_at_claim is not None and not ctx.should_stop:
                due, claimed_at = ctx._due_at_claim
                self._metrics.observe_start_lag(ctx.queue, ctx.task, due + now - claimed_at)

    def settle(self, ctx: JobContext, outcome: Outcome) -> None:
        """A run ended: its corrected outcome goes to the completer, and the job is no longer held here."""
        if ctx._started:
            self._metrics.observe_run(ctx.queue, ctx.task, time.perf_counter() - ctx._started)
        final = corrected(ctx, outcome)
        if final is None:
            with self._lock:
                if self._jobs.pop(ctx.id, None) is not None:
                    self._stopped.append(ctx)
            return
        if final.kind is Kind.DISCARD:
            self._counts["lost"] += 1
            self._metrics.count(ctx.queue, ctx.task, "lost")
        else:
            assert self.completer is not None
            self.completer.submit(final)
        with self._lock:
            self._jobs.pop(ctx.id, None)
            held = len(self._jobs)
        self._on_free(held)

    # -- from the heartbeater and the listener ---------------------------

    def leases(self) -> list[tuple[int, int]]:
        """(job id, token) of every lease to keep: held jobs not let go, and outcomes not yet written."""
        with self._lock:  # not those let go (lost, or stuck behind a blocked loop): their leases run out
            pairs = [(ctx.id, ctx.lease_token) for ctx in self._jobs.values() if not ctx.lease_lost]
        if self.completer is not None:
            pairs += self.completer.pending_jobs()
        return pairs

    def lose(self, job_id: int) -> None:
        ctx = self._jobs.get(job_id)
        if ctx is not None and not ctx.lease_lost:
            log.warning("job %s: lease lost; telling its handler to stop", job_id, extra={"job_id": job_id})
            ctx._mark_lease_lost()
            self.interrupt(job_id)

    def cancel(self, job_id: int) -> None:
        ctx = self._jobs.get(job_id)
        if ctx is not None and not ctx.cancel_requested:
            log.info("job %s: cancellation requested", job_id, extra={"job_id": job_id})
            ctx._request_cancel()
            self.interrupt(job_id)

    # -- at shutdown -----------------------------------------------------

    def stop(self, contexts: list[JobContext]) -> None:
        """Ask these runs to stop: they end handed back, not failed."""
        for ctx in contexts:
            ctx._request_stop()
            self.interrupt(ctx.id)

    def let_go(self) -> list[JobContext]:
        """Give up every job still held (whatever its run returns now is discarded) and those stopped: to hand back."""
        with self._lock:
            left = list(self._jobs.values())
            self._jobs.clear()
            for ctx in left:
                ctx._mark_lease_lost()
            stopped, self._stopped = self._stopped, []
        return stopped + left

    def take_stopped(self) -> list[JobContext]:
        """The jobs whose runs stopped when asked: to hand back."""
        with self._lock:
            stopped, self._stopped = self._stopped, []
        return stopped
