"""A watchdog for the event loop of async handlers: notices it blocked, and names the job that blocks it.

A coroutine that never awaits (CPU-bound work, a blocking call) holds the
loop: no other coroutine runs, yet the worker's heartbeats, on their own
thread, would keep every lease alive. The watchdog sees the loop's tick
stop; past ``threshold`` seconds it reads the loop thread's stack
(``sys._current_frames()``), finds the frame of the function that runs one
job (``frames``: their code objects) and its ``ctx``, and calls
``on_blocked(blocker, stuck, seconds)`` with the other jobs held up
behind it, again while the block lasts (new jobs may queue up meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection
from types import CodeType, FrameType

from pgsched.core.job import JobContext

log = logging.getLogger(__name__)


class LoopWatch:
    """Ticks on ``loop`` and watches the ticks from a thread of its own."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        loop_thread: threading.Thread,
        *,
        threshold: float,
        jobs: Callable[[], list[JobContext]],
        on_blocked: Callable[[JobContext | None, list[JobContext], float], None],
        frames: Collection[CodeType],
    ) -> None:
        self._loop = loop
        self._loop_thread = loop_thread
        self.threshold = threshold
        self._jobs = jobs
        self._on_blocked = on_blocked
        self._frames = frozenset(frames)
        self._tick_every = max(0.01, min(0.25, threshold / 4))
        self._last_tick = time.monotonic()
        self._stop = threading.Event()
        self.blocked = False
        self.blocks = 0  # block episodes seen
        self._thread = threading.Thread(target=self._watch, name="pgsched-loop-watch", daemon=True)

    def start(self) -> None:
        self._loop.call_soon_threadsafe(self._tick)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _tick(self) -> None:
        self._last_tick = time.monotonic()
        if not self._stop.is_set():
            self._loop.call_later(self._tick_every, self._tick)

    def _watch(self) -> None:
        while not self._stop.wait(self._tick_every):
            silent = time.monotonic() - self._last_tick
            if silent < self.threshold:
                if self.blocked:
                    log.warning("event loop running again after %.1fs blocked", silent)
                self.blocked = False
                continue
            jobs = self._jobs()
            if not jobs and not self.blocked:
                continue
            blocker, stack = self._blocker()
            stuck = [ctx for ctx in jobs if ctx is not blocker]
            if not self.blocked:
                self.blocked = True
                self.blocks += 1
                log.error(
                    "event loop blocked for %.1fs by %s; leases of the %d jobs behind it are no longer renewed "
                    "(they run elsewhere once their lease expires). Its stack:\n%s",
                    silent,
                    "an unknown caller" if blocker is None else f"job {blocker.id} ({blocker.task})",
                    len(stuck),
                    stack,
                    extra={"job_id": None if blocker is None else blocker.id},
                )
            self._on_blocked(blocker, stuck, silent)

    def _blocker(self) -> tuple[JobContext | None, str]:
        frame: FrameType | None = sys._current_frames().get(self._loop_thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
        while frame is not None:
            if frame.f_code in self._frames:
                ctx = frame.f_locals.get("ctx")
                if isinstance(ctx, JobContext):
                    return ctx, stack
            frame = frame.f_back
        return None, stack
