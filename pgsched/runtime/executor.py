"""Runs handlers: sync ones on a pool of threads (or of child processes), async ones on an event loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from pgsched.core.job import JobContext, _current
from pgsched.core.outcome import Kind, Outcome, timed_out
from pgsched.core.task import Task
from pgsched.errors import PgschedError, RunFailed, Snooze
from pgsched.runtime.commands import COMMAND_TASK, overrun_error
from pgsched.runtime.deadlines import Deadlines
from pgsched.runtime.handler import _await, _stopped_before_start, run_async, run_sync, time_limit
from pgsched.runtime.journal import Journal
from pgsched.runtime.limits import RunLimits
from pgsched.runtime.loopwatch import LoopWatch
from pgsched.runtime.procpool import ChildSlot

log = logging.getLogger(__name__)

Resolve = Callable[[str], "Task[Any, Any] | None"]
Done = Callable[[JobContext, Outcome], None]
T = TypeVar("T")

# How long a job whose start its claim recorded may wait for a slot under that start: its recorded start (and
# the database's deadline, which runs from it) is then early by at most this, beside the claim's reply time
# (as for a job claimed into a free slot); config.timeout_grace covers it. A job that waits longer has its
# start recorded again when it gets its slot (the Starter, pgsched.start()).
START_TOLERANCE = 0.050


def _in_child(ctx: JobContext) -> bool:
    """Whether the process pool runs this job in a child: command jobs stay on the worker's threads (their runner
    only supervises the program, which has its own process group, and answers cancels and lost leases)."""
    return ctx.job.task != COMMAND_TASK


class Executor:
    """Slots for running handlers. ``submit`` never blocks; the worker bounds what it submits.

    At most ``concurrency`` jobs run at once, whatever their kind; the others
    wait, in order, for a slot. A sync handler runs on one of the pool's
    threads. A coroutine handler runs as a task on the event loop thread:
    jobs are handed to the loop a batch at a time and finish there, so a
    no-op coroutine costs no thread switch of its own.

    With a ``gate`` (the worker's Starter), jobs that get a slot pass
    through it first: it records their start in the database, and refuses
    those cancelled or lost meanwhile, then hands them to ``launch``. A job
    whose start the claim recorded already (``_stamped``) skips the gate if
    it waited for its slot ``START_TOLERANCE`` at most; after a longer wait,
    the gate records its start anew.

    Time limits (docs/timeouts.md): a coroutine past its limit is cancelled.
    In the thread pool, a sync run past its limit is failed at once and its
    thread abandoned (a thread cannot be killed) and replaced; once
    ``max_abandoned`` abandoned threads are still running, ``on_recycle``
    asks the worker to restart its process. With ``pool="process"``, each
    slot runs sync handlers in a child process (loaded from ``app_ref``),
    killed and replaced when a run overruns. With ``loop_block_timeout``, a
    watchdog sees an event loop blocked that long: the loop is abandoned
    (its thread left to the blocking call, counted with the abandoned
    threads) and a fresh loop runs the coroutines that come next. The job
    blocking it fails (an attempt counted); the jobs that were on it are
    handed back without spending one (a snooze of no delay); their slots are
    free again; ``on_loop_blocked`` is told.
    """

    def __init__(
        self,
        concurrency: int,
        resolve: Resolve,
        done: Done,
        *,
        pool: str = "thread",
        app_ref: str | None = None,
        dsn: str | None = None,
        max_abandoned: int | None = None,
        on_recycle: Callable[[int], None] | None = None,
        loop_block_timeout: float = 0.0,
        on_loop_blocked: Callable[[JobContext | None, list[JobContext], float], None] | None = None,
    ) -> None:
        if pool not in ("thread", "process"):
            raise ValueError(f"pool must be 'thread' or 'process', not {pool!r}")
        if pool == "process" and not app_ref:
            raise ValueError("the process pool needs the app's MODULE:ATTRIBUTE (app_ref) to load it in its children")
        self._concurrency = concurrency
        self._resolve = resolve
        self._done = done
        self.pool = pool
        self._app_ref = app_ref
        self.dsn = dsn
        self.max_abandoned = max(1, concurrency // 2) if max_abandoned is None else max_abandoned
        self._on_recycle = on_recycle
        self.abandoned = 0  # abandoned threads still running their overrun handler
        self.timeouts = 0  # runs failed for overrunning their limit
        self._deadlines: Deadlines | None = None
        self._slots: list[ChildSlot] = []
        self._loop_block_timeout = loop_block_timeout
        self._on_loop_blocked = on_loop_blocked
        self._watch: LoopWatch | None = None
        self._loop_jobs: dict[int, JobContext] = {}  # jobs handed to the event loop, until they finish
        self._gone: dict[int, JobContext] = {}  # id(ctx) -> ctx of jobs settled when their loop was abandoned
        self.loops_abandoned = 0  # event loops given up because a handler blocked them
        # id(ctx) -> sync handlers awaiting a coroutine on the loop (a sync wrapper of an async def)
        self._bridged: dict[int, tuple[JobContext, asyncio.AbstractEventLoop, concurrent.futures.Future[Any]]] = {}
        self._lock = threading.Lock()
        self._waiting: deque[JobContext] = deque()
        self._running = 0
        self._freed = 0  # slots freed so far
        self._turnover: tuple[float, int, float] = (time.monotonic(), 0, 0.0)  # (when, _freed then, slots freed/s)
        self._queue: queue.SimpleQueue[JobContext | None] = queue.SimpleQueue()
        # Thread pool: a thread is started when a sync job finds none idle (up to concurrency), so a worker whose
        # handlers are coroutines starts none, and --concurrency 1000 costs no thousand threads at start. The
        # process pool starts every slot's thread, and child, at once: a child's start is not a job's latency.
        self._lazy = pool == "thread"
        # One token per thread waiting at the queue and not yet promised a job, while the pool may still grow.
        self._idle = threading.Semaphore(0)
        self._pool_lock = threading.Lock()  # _pool_size
        self._pool_size = 0 if self._lazy else concurrency  # threads serving the queue (not abandoned)
        self._closing = False
        self._threads = [] if self._lazy else [self._new_thread(i) for i in range(concurrency)]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        self._loop_thread: threading.Thread | None = None
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self._started = threading.Event()
        self.gate: Callable[[list[JobContext]], None] | None = None
        self.on_launch: Callable[[list[JobContext]], None] | None = None  # told of each batch about to run
        self.journal: Journal | None = None  # progress and durable steps of the handlers (from start(), with dsn)
        self._unconfined: set[str] = set()  # services whose resource limits this worker cannot enforce, said once

    def _new_thread(self, i: int) -> threading.Thread:
        slot = None
        if self.pool == "process":
            assert self._app_ref is not None
            slot = ChildSlot(self._app_ref, dsn=lambda: self.dsn, name=f"pgsched-handler-process-{i}")
            self._slots.append(slot)
        return threading.Thread(target=self._thread_loop, args=(slot,), name=f"pgsched-handler-{i}", daemon=True)

    def start(self) -> None:
        # The process pool watches deadlines too: command jobs run on its threads (_in_child).
        self._deadlines = Deadlines(self._overrun)
        if self.dsn is not None and self.journal is None:
            self.journal = Journal(self.dsn, prepare=False)  # opens its connection at the first use
        for thread in self._threads:
            thread.start()
        if self._lazy:
            for _ in range(self._queue.qsize()):  # sync jobs launched before the start
                self._ensure_thread()

    @property
    def loop_blocked(self) -> bool:
        """True while the watchdog sees the event loop blocked past its threshold."""
        return self._watch is not None and self._watch.blocked

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._loop = loop
                self._started = threading.Event()  # a fresh loop after an abandoned one: wait for it again
                self._loop_thread = threading.Thread(target=self._run_loop, name="pgsched-async", daemon=True)
                self._loop_thread.start()
                self._started.wait()
                if self._loop_block_timeout > 0:
                    self._watch = LoopWatch(
                        loop,
                        self._loop_thread,
                        threshold=self._loop_block_timeout,
                        jobs=self._stuck_jobs,
                        on_blocked=functools.partial(self._abandon_loop, loop),
                        frames={run_async.__code__, Executor._tracked.__code__},
                    )
                    self._watch.start()
            return self._loop

    def _stuck_jobs(self) -> list[JobContext]:
        """The jobs a blocked loop holds up: those handed to it, sync handlers awaiting it, those waiting for a
        slot."""
        with self._lock:
            return [*self._loop_jobs.values(), *(ctx for ctx, _, _ in self._bridged.values()), *self._waiting]

    def _run_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        loop.call_soon(self._started.set)
        loop.run_forever()
        with self._loop_lock:
            abandoned = loop is not self._loop
        if abandoned:
            # Its blocking call returned at last: end what is left on it (settled already), and the thread.
            pending = asyncio.all_tasks(loop)
            for running in pending:
                running.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()
            with self._lock:
                self.abandoned -= 1
            log.info("an abandoned event loop ran again; what was left on it is cancelled, and its thread exits")

    def _abandon_loop(
        self, loop: asyncio.AbstractEventLoop, blocker: JobContext | None, _stuck: list[JobContext], seconds: float
    ) -> None:
        """The watchdog saw ``loop`` blocked: give it up and settle every job that was on it (the watch thread).

        A thread cannot be interrupted, so the loop's thread is left to the blocking call, and stops its loop
        if that ever returns. The blocking job (or every job on the loop, when the watchdog could not tell which
        one blocks it) fails: an attempt is counted, so a job that blocks every loop it lands on goes dead after
        max_attempts instead of being passed on for free. The others are handed back at once without spending
        an attempt. Their slots are free again; a fresh loop starts with the next coroutine.
        """
        with self._loop_lock:
            if loop is not self._loop:
                return  # already abandoned
            watch, self._watch = self._watch, None
            self._loop = None
            self._loop_thread = None
            self._tasks = {}
            with self._lock:
                on_loop = list(self._loop_jobs.values())
                self._loop_jobs.clear()
                for ctx in on_loop:
                    self._gone[id(ctx)] = ctx
                bridged = [(ctx, future) for ctx, owner, future in self._bridged.values() if owner is loop]
                self._running -= len(on_loop)
                self.abandoned += 1
                self.loops_abandoned += 1
                abandoned = self.abandoned
        if watch is not None:
            watch.close()
        loop.call_soon_threadsafe(loop.stop)  # once the blocking call returns, nothing more runs on it
        error = (
            f"blocked the event loop for {seconds:.1f} s (an async handler that does not await); the run was "
            "abandoned with its loop"
        )
        log.error(
            "abandoned the event loop blocked by %s after %.1fs: its job fails, %d other jobs on it are handed back, "
            "a fresh loop runs the next ones (%d abandoned, recycling the worker at %d)",
            "an unknown caller" if blocker is None else f"job {blocker.id} ({blocker.task})",
            seconds,
            len(on_loop) + len(bridged) - (blocker is not None),
            abandoned,
            self.max_abandoned,
            extra={"job_id": None if blocker is None else blocker.id},
        )
        for ctx in on_loop:
            if blocker is None or ctx is blocker:
                outcome = Outcome(ctx.job, Kind.FAIL, error=error)
            else:
                outcome = Outcome(ctx.job, Kind.SNOOZE, delay=timedelta(0))
            try:
                self._done(ctx, outcome)
            except Exception:  # pragma: no cover - a bug in the worker; the other jobs still get theirs
                log.exception("recording the outcome of job %s failed", ctx.id)
        for ctx, verdict in bridged:  # their threads wait for the loop: end the wait (they finish the job)
            verdict.set_exception(RunFailed(error) if blocker is None or ctx is blocker else Snooze(0))
        with self._lock:
            starting = self._take_slots()
        self._admit(starting)
        if self._on_loop_blocked is not None:
            self._on_loop_blocked(blocker, on_loop, seconds)
        if abandoned >= self.max_abandoned and self._on_recycle is not None:
            self._on_recycle(abandoned)

    # -- admission -------------------------------------------------------

    def submit(self, ctx: JobContext) -> None:
        self.submit_many([ctx])

    def submit_many(self, contexts: list[JobContext]) -> None:
        """Queue jobs for slots; those that find a free slot start now."""
        with self._lock:
            self._waiting.extend(contexts)
            starting = self._take_slots()
        self._admit(starting)

    def _take_slots(self) -> list[JobContext]:
        # Caller holds self._lock.
        starting: list[JobContext] = []
        while self._running < self._concurrency and self._waiting:
            starting.append(self._waiting.popleft())
            self._running += 1
        return starting

    def _admit(self, contexts: list[JobContext]) -> None:
        if not contexts:
            return
        if self.gate is None:
            self.launch(contexts)
            return
        now = time.monotonic()
        stamped: list[JobContext] = []
        gated: list[JobContext] = []
        for ctx in contexts:
            (stamped if ctx._stamped and now - ctx._stamped_at <= START_TOLERANCE else gated).append(ctx)
        if stamped:
            self.launch(stamped)
        if gated:
            self.gate(gated)

    def free_slots(self) -> int:
        """Slots that no job holds or waits for: jobs submitted now start at once, up to this many."""
        with self._lock:
            return max(0, self._concurrency - self._running - len(self._waiting))

    def slots_within(self, seconds: float) -> int:
        """How many jobs submitted now would get a slot within ``seconds``: the free slots, and those that
        free up meanwhile at the recent rate (slots freed a second, averaged over about a second) beyond
        the jobs already waiting for one."""
        now = time.monotonic()
        with self._lock:
            when, freed, rate = self._turnover
            if now - when >= 0.05:
                weight = min(1.0, now - when)
                rate = rate * (1 - weight) + (self._freed - freed) / (now - when) * weight
                self._turnover = (now, self._freed, rate)
            free = max(0, self._concurrency - self._running - len(self._waiting))
            return free + max(0, int(rate * seconds) - len(self._waiting))

    def launch(self, contexts: list[JobContext]) -> None:
        """Run jobs that hold a slot (each checks its stop signals first)."""
        if self.on_launch is not None:
            self.on_launch(contexts)
        if self.journal is not None:
            for ctx in contexts:
                ctx._journal = self.journal
        coroutines: list[tuple[Task[Any, Any], JobContext]] = []
        for ctx in contexts:
            task = self._resolve(ctx.job.task)
            if task is not None and task.service and task.name not in self._unconfined:
                self._say_unconfined(task)
            if task is not None and task.is_async:
                coroutines.append((task, ctx))
            else:
                self._queue.put(ctx)
                if self._lazy:
                    self._ensure_thread()
        if coroutines:
            with self._lock:
                for _, ctx in coroutines:
                    self._loop_jobs[ctx.id] = ctx
            loop = self._ensure_loop()
            if threading.current_thread() is self._loop_thread:
                self._start_coroutines(coroutines)
            else:
                loop.call_soon_threadsafe(self._start_coroutines, coroutines)

    def _finish(self, ctx: JobContext, outcome: Outcome) -> None:
        if self._gone and self._settled(ctx):
            return  # settled when its loop was abandoned; its slot was freed then
        try:
            self._done(ctx, outcome)
        except Exception:  # pragma: no cover - a bug in the worker; keep the slot accounting right
            log.exception("recording the outcome of job %s failed", ctx.id)
        with self._lock:
            if self._loop_jobs.get(ctx.id) is ctx:
                del self._loop_jobs[ctx.id]
            self._running -= 1
            self._freed += 1
            starting = self._take_slots()
        self._admit(starting)

    def _settled(self, ctx: JobContext) -> bool:
        """Whether ctx's job was settled when its loop was abandoned (then nothing more of it counts)."""
        with self._lock:
            return self._gone.pop(id(ctx), None) is ctx

    # -- coroutine handlers (on the loop thread) -------------------------

    def _start_coroutines(self, batch: list[tuple[Task[Any, Any], JobContext]]) -> None:
        loop = asyncio.get_running_loop()
        for task, ctx in batch:
            if self._gone and self._settled(ctx):
                continue  # its loop was abandoned before it started: settled already
            if ctx.should_stop:
                # Cancelled, stopped or lost while it waited for a slot: do not start it.
                self._finish(ctx, _stopped_before_start(ctx))
                continue
            running = loop.create_task(run_async(task, ctx))
            if loop is self._loop:
                self._tasks[ctx.id] = running
            running.add_done_callback(functools.partial(self._coroutine_done, ctx))

    def _coroutine_done(self, ctx: JobContext, running: asyncio.Task[Outcome]) -> None:
        if self._tasks.get(ctx.id) is running:  # not a task of an abandoned loop (the job may run anew)
            del self._tasks[ctx.id]
        outcome = _stopped_before_start(ctx) if running.cancelled() else running.result()
        self._finish(ctx, outcome)

    # -- sync handlers (on the pool's threads) ---------------------------

    def _ensure_thread(self) -> None:
        """For a job just queued: an idle thread takes it, else a new one (the queue holds at most concurrency
        sync jobs, and the pool grows to that many threads at most)."""
        if self._pool_size >= self._concurrency:
            return  # every thread there can be is there: the first one back at the queue takes it
        if self._idle.acquire(blocking=False):
            return
        with self._pool_lock:
            if self._deadlines is None or self._closing or self._pool_size >= self._concurrency:
                # not started yet (start() serves what waits), shutting down (no job starts after that), or the
                # pool just filled up (the first thread back at the queue takes it)
                return
            self._pool_size += 1
            thread = self._new_thread(len(self._threads))
            self._threads.append(thread)
        thread.start()

    def _thread_loop(self, slot: ChildSlot | None) -> None:
        if slot is not None:
            try:
                slot.ensure()  # ready before the first job: its start latency is not a child's start
            except RuntimeError as exc:
                log.error("%s; its jobs will fail until a new one loads", exc)
        first = True
        while True:
            if self._lazy and not first and self._pool_size < self._concurrency:
                self._idle.release()  # back at the queue while the pool may still grow: the next job needs no thread
            first = False
            ctx = self._queue.get()
            if ctx is None:
                if slot is not None:
                    slot.close()
                return
            if ctx.should_stop:
                self._finish(ctx, _stopped_before_start(ctx))
                continue
            task = self._resolve(ctx.job.task)
            limit = time_limit(task, ctx)
            if slot is not None and task is not None and _in_child(ctx):
                ran = slot.run(ctx, limit, self._service_limits(task, ctx))
                if ran is not None and ran.kind is not Kind.DISCARD and ctx.timed_out:
                    self.timeouts += 1
                self._finish(ctx, _stopped_before_start(ctx) if ran is None else ran)
                continue
            deadlines = self._deadlines if limit is not None else None
            if deadlines is not None:
                assert limit is not None
                deadlines.watch(ctx, limit)
            outcome = run_sync(task, ctx, functools.partial(self._await_for, ctx))
            if deadlines is not None and not deadlines.settle(ctx):
                # Overran: the job was failed and this thread replaced; it leaves the pool.
                with self._lock:
                    self.abandoned -= 1
                log.info("job %s: the abandoned handler returned at last; its thread exits", ctx.id)
                if slot is not None:
                    slot.close()
                return
            self._finish(ctx, outcome)

    def _say_unconfined(self, task: Task[Any, Any]) -> None:
        """Once per service task: its resource limits hold only where its handler has a process of its own."""
        self._unconfined.add(task.name)
        if self.pool == "process" and not task.is_async:
            return
        log.warning(
            "service %s runs in the worker's own process (%s): its memory_limit and cpu_limit are not enforced; "
            "run sync services with --pool process to enforce them",
            task.name,
            "event loop" if task.is_async else "thread pool",
        )

    def _service_limits(self, task: Task[Any, Any], ctx: JobContext) -> RunLimits | None:
        """A service's resource limits, enforced in the process pool (docs/services.md); None for other jobs."""
        if not task.service or self.journal is None:
            return None
        try:
            return RunLimits.from_args(*self.journal.resource_limits(ctx))
        except PgschedError as exc:
            log.warning("job %s: could not read its resource limits (%s); it runs unlimited", ctx.id, exc)
            return None

    def _overrun(self, ctx: JobContext, limit: float) -> None:
        """A sync run passed its limit (the deadlines thread): fail the job, abandon and replace its thread."""
        ctx._mark_timed_out()
        with self._lock:
            self.abandoned += 1
            self.timeouts += 1
            abandoned = self.abandoned
            thread = None
            if not self._lazy:
                thread = self._new_thread(len(self._threads))
                self._threads.append(thread)
        if self._lazy:
            with self._pool_lock:
                # It leaves the pool; the next sync job that finds no idle thread starts one. Idle threads were not
                # counted while the pool was full: count afresh (too few counted only starts a thread early).
                self._pool_size -= 1
                self._idle = threading.Semaphore(0)
        if thread is not None:
            thread.start()
        self.cancel_async(ctx.id)  # a coroutine it awaits on the loop (a sync wrapper of an async def) stops too
        log.error(
            "job %s (%s): sync handler still running after its %g s timeout; the job fails, its thread is "
            "abandoned (%d abandoned, recycling the worker at %d)",
            ctx.id,
            ctx.task,
            limit,
            abandoned,
            self.max_abandoned,
            extra={"job_id": ctx.id, "task": ctx.task},
        )
        if ctx.job.task == COMMAND_TASK:
            self._finish(ctx, Outcome(ctx.job, Kind.FAIL, error=overrun_error(ctx.job, limit)))
        else:
            self._finish(ctx, timed_out(ctx.job, limit))
        if abandoned >= self.max_abandoned and self._on_recycle is not None:
            self._on_recycle(abandoned)

    def _await_for(self, ctx: JobContext, awaitable: Awaitable[Any]) -> Any:
        return self._on_loop(ctx, _await(awaitable))

    def _on_loop(self, ctx: JobContext, coro: Coroutine[Any, Any, T]) -> T:
        """Run coro on the event loop as ctx's job (cancel_async reaches it), holding this slot until it ends.

        Should the loop be abandoned meanwhile, the wait ends with what _abandon_loop decided (a failure for
        the job that blocks it, a hand-back for the others)."""
        loop = self._ensure_loop()
        verdict: concurrent.futures.Future[Any] = concurrent.futures.Future()  # set if the loop is abandoned
        with self._lock:
            self._bridged[id(ctx)] = (ctx, loop, verdict)
        try:
            if loop is not self._loop:  # abandoned before it was registered: hand it back, it never ran here
                coro.close()
                raise Snooze(0)
            future = asyncio.run_coroutine_threadsafe(self._tracked(ctx, coro), loop)
            concurrent.futures.wait([future, verdict], return_when=concurrent.futures.FIRST_COMPLETED)
            if future.done():
                return future.result()
            raise verdict.exception() or RuntimeError("the event loop was abandoned")
        finally:
            with self._lock:
                self._bridged.pop(id(ctx), None)

    async def _tracked(self, ctx: JobContext, coro: Coroutine[Any, Any, T]) -> T:
        # Registered before the first await, on the loop: cancel_async() either
        # finds this task, or ran before it and had already set the context.
        current = asyncio.current_task()
        assert current is not None
        self._tasks[ctx.id] = current
        _current.set(ctx)  # this task's own copy of the context
        try:
            if ctx.should_stop:
                coro.close()
                raise asyncio.CancelledError
            return await coro
        finally:
            self._tasks.pop(ctx.id, None)

    # -- control ---------------------------------------------------------

    def cancel_async(self, job_id: int) -> None:
        """Cancel the coroutine of a job, if it is one (sync handlers watch their context instead)."""
        loop = self._loop
        if loop is None:
            return

        def cancel() -> None:
            running = self._tasks.get(job_id)
            if running is not None:
                running.cancel()

        loop.call_soon_threadsafe(cancel)

    def take_unstarted(self) -> list[JobContext]:
        """Remove and return the jobs that wait for a slot (for handing back at shutdown)."""
        with self._lock:
            taken = list(self._waiting)
            self._waiting.clear()
        return taken

    def shutdown(self) -> None:
        with self._pool_lock:
            self._closing = True
        if self._deadlines is not None:
            self._deadlines.close()
        if self._watch is not None:
            self._watch.close()
        if self.journal is not None:
            self.journal.close()
        for _ in self._threads:
            self._queue.put(None)
        loop = self._loop
        if loop is not None:

            def stop() -> None:
                # Whatever still runs was handed back already; its outcome is discarded.
                for running in list(self._tasks.values()):
                    running.cancel()
                loop.call_later(0.05, loop.stop)

            loop.call_soon_threadsafe(stop)
