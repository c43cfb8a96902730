"""Deadlines of running sync handlers: a thread that notices a run past its timeout and says so once."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from pgsched.core.job import JobContext

log = logging.getLogger(__name__)


class Deadlines:
    """Watches runs that have a time limit; calls ``on_overrun(ctx, limit)`` for each run past it.

    ``watch()`` before the handler runs, ``settle()`` when it returned: exactly
    one of the two sides wins each run. ``settle()`` returns False when the
    run had already overrun (the job was failed by ``on_overrun``): the
    returning thread must then drop whatever the handler produced.
    """

    def __init__(self, on_overrun: Callable[[JobContext, float], None], *, name: str = "pgsched-deadlines") -> None:
        self._on_overrun = on_overrun
        self._cond = threading.Condition()
        self._running: dict[int, tuple[JobContext, float]] = {}  # job id -> (context, limit in seconds)
        self._heap: list[tuple[float, int, JobContext]] = []  # (monotonic deadline, seq, run); stale ones skipped
        self._seq = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def watch(self, ctx: JobContext, limit: float) -> None:
        with self._cond:
            self._running[ctx.id] = (ctx, limit)
            heapq.heappush(self._heap, (time.monotonic() + limit, next(self._seq), ctx))
            self._cond.notify()

    def settle(self, ctx: JobContext) -> bool:
        """The run ended: True if in time (the caller records its outcome), False if it had overrun."""
        with self._cond:
            entry = self._running.get(ctx.id)
            if entry is None or entry[0] is not ctx:
                return False
            del self._running[ctx.id]
            return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            overdue: list[tuple[JobContext, float]] = []
            with self._cond:
                while not self._closed:
                    now = time.monotonic()
                    while self._heap and self._heap[0][0] <= now:
                        _, _, ctx = heapq.heappop(self._heap)
                        entry = self._running.get(ctx.id)
                        if entry is not None and entry[0] is ctx:  # else settled in time (or a later run)
                            del self._running[ctx.id]
                            overdue.append(entry)
                    if overdue:
                        break
                    self._cond.wait(min(1.0, self._heap[0][0] - now) if self._heap else 1.0)
                if self._closed:
                    return
            for ctx, limit in overdue:
                try:
                    self._on_overrun(ctx, limit)
                except Exception:  # pragma: no cover - a bug; keep watching the others
                    log.exception("handling the overrun of job %s failed", ctx.id)
