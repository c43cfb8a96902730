"""The worker: claims due jobs in batches sized to free slots, runs them, and writes outcomes back fenced.

Threads, each with its own connection: the claim loop (this module), the
handler pool (executor.py), the starter, the completer, the heartbeater and
the listener. The jobs it holds, and what becomes of each outcome, are held.py's:
the executor hands outcomes through it to the completer; the worker hears
only that a slot is free.
No transaction is held open while a handler runs: the claim commits, the
handler runs, the completion is a separate short statement.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from datetime import timedelta
from types import FrameType
from typing import Any

import psycopg
from psycopg.rows import class_row, tuple_row

from pgsched.core.job import ClaimedJob, JobContext
from pgsched.core.registry import Registry, sync_schedules
from pgsched.core.version import VERSION
from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting
from pgsched.db.settings import is_embedded_fallback
from pgsched.observe.metrics import MetricsServer, WorkerMetrics, worker_registry
from pgsched.observe.redact import describe
from pgsched.runtime import burst, dependencies
from pgsched.runtime.claiming import PassOver, claimed_row, job_context
from pgsched.runtime.completer import Completer
from pgsched.runtime.executor import START_TOLERANCE, Executor
from pgsched.runtime.expansion import ScheduleKeeper
from pgsched.runtime.heartbeater import Heartbeater
from pgsched.runtime.held import Held
from pgsched.runtime.housekeeping import LoneHousekeeping
from pgsched.runtime.limits import resource_limits
from pgsched.runtime.listener import Listener
from pgsched.runtime.options import WorkerOptions, default_worker_name
from pgsched.runtime.outcomes import record_written
from pgsched.runtime.routing import ClaimQueues
from pgsched.runtime.starter import Starter
from pgsched.runtime.vacuumer import Vacuumer

log = logging.getLogger(__name__)

# Worker.run()'s exit code when abandoned handler threads piled up: restart the process
# (`pgsched worker` re-executes itself; with --recycle exit it exits with it, EX_TEMPFAIL).
RECYCLE_EXIT_CODE = 75
BURST_REPEAT = 30.0  # seconds between repeats of an unchanged --burst "held back" line


class Worker:
    """Runs an App's tasks from its queues until stopped (SIGTERM/SIGINT, stop(), or --burst running dry)."""

    def __init__(self, app: Registry, options: WorkerOptions | None = None) -> None:
        self.app = app
        self.options = options or WorkerOptions()
        self.options.validate()
        self.name = self.options.name or default_worker_name()
        self.capacity = self.options.concurrency + (
            self.options.concurrency if self.options.prefetch is None else max(0, self.options.prefetch)
        )
        self._threshold = max(1, min(self.capacity // 2, self.options.concurrency))
        self._wake = threading.Event()
        self._stopping = threading.Event()  # stop claiming
        self._giving_up = threading.Event()  # stop retrying connections
        self._forced = False
        self._shard_cursor = random.randrange(1024)
        self._queues = ClaimQueues(self.options.queues, refresh=self.options.poll_interval)
        self.counts = {
            "claimed": 0,
            "completed": 0,
            "failed": 0,
            "snoozed": 0,
            "dead": 0,
            "lost": 0,
            "cancelled": 0,
            "passed_over": 0,
        }
        self._recycle = False
        self.metrics = WorkerMetrics(
            name=self.name,
            concurrency=self.options.concurrency,
            running=lambda: len(self._held),
            version=VERSION,
            loops_abandoned=lambda: self._executor.loops_abandoned,
            progress=lambda: [
                (c.queue, c.task, c.id, c.last_progress[0]) for c in self._held.contexts() if c.last_progress
            ],
        )
        self._held = Held(self.metrics, self.counts, on_free=self._slot_free)
        self._executor = Executor(
            self.options.concurrency,
            self.app.tasks.get,
            self._held.settle,
            pool=self.options.pool,
            app_ref=self.options.app_ref,
            max_abandoned=self.options.max_abandoned,
            on_recycle=self._on_recycle,
            loop_block_timeout=self.options.loop_block_timeout,
        )
        self._held.interrupt = self._executor.cancel_async
        self._executor.on_launch = self._held.launched
        self._completer: Completer | None = None
        self._starter: Starter | None = None
        self._heartbeater: Heartbeater | None = None
        self._listener: Listener | None = None
        self._vacuumer: Vacuumer | None = None
        self._keeper: ScheduleKeeper | None = None  # expands schedules on shards no scanner holds
        self._claim_db: Reconnecting | None = None
        self._load_dependencies: dependencies.Loader | None = None
        self._housekeeping = LoneHousekeeping(
            self.name,
            enabled=self.options.housekeeping,
            poll_interval=self.options.poll_interval,
            lease=self.options.lease,
        )
        self._last_claim = 0.0
        self._rate_wait: float | None = None  # set when every queue is at its rate limit
        self._next_rate_check = 0.0
        self._burst_said = ""  # the last --burst "held back" line, and when it was logged
        self._burst_said_at = 0.0
        self._metrics_server: MetricsServer | None = None
        self._passer = PassOver(self.metrics, self.counts)

    # -- lifecycle -------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming and shut down gracefully (what SIGTERM does)."""
        self._stopping.set()
        self._wake.set()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._stopping.is_set():
            log.warning("second %s: handing back running jobs and exiting now", signal.Signals(signum).name)
            self._forced = True
        else:
            log.info(
                "%s: no new claims; waiting up to %.0fs for %d running jobs",
                signal.Signals(signum).name,
                self.options.shutdown_timeout,
                len(self._held),
            )
        self.stop()

    def run(self) -> int:
        """Run until stopped; returns the process exit code (0 on a clean stop)."""
        dsn = self.app.dsn
        previous: dict[signal.Signals, Any] = {}
        if self.options.install_signal_handlers and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, self._on_signal)
        try:
            return self._run(dsn)
        finally:
            for signum, handler in previous.items():  # the caller's Ctrl-C works again
                if handler is not None:  # None: not installed from Python, nothing to restore
                    signal.signal(signum, handler)

    def _run(self, dsn: str) -> int:
        opts = self.options
        self._claim_db = Reconnecting(dsn, purpose=f"worker {self.name}", stop=self._stopping, prepare=opts.prepare)
        self._load_dependencies = dependencies.from_dsn(dsn)  # every job's ctx.dependencies
        self._startup(self._claim_db.get())
        self._start_metrics()
        self._completer = Completer(
            dsn,
            stop=self._giving_up,
            on_written=functools.partial(record_written, self.metrics, self.counts),
            prepare=opts.prepare,
            max_batch=opts.completion_batch,
            flush_interval=opts.completion_flush_interval,
        )
        self._heartbeater = Heartbeater(
            dsn,
            worker=self.name,
            lease=opts.lease,
            interval=opts.heartbeat_interval or opts.lease / 3,
            held=self._held.leases,
            on_lost=self._held.lose,
            on_cancel=self._held.cancel,
            stop=threading.Event(),
            prepare=opts.prepare,
            listening=lambda: self._listener is not None and self._listener.connected.is_set(),
        )
        self._held.completer = self._completer
        self._starter = Starter(dsn, launch=self._executor.launch, stop=self._giving_up, prepare=opts.prepare)
        self._executor.dsn = dsn  # the process pool's children enqueue into the same database
        self._executor.gate = self._starter.submit
        if opts.listen:
            self._listener = Listener(
                dsn,
                opts.queues,
                self._wake.set,
                stop=threading.Event(),
                on_cancel=self._held.cancel,
                on_connect=self._heartbeater.kick,  # cancels sent while the listener was down
            )
            self._listener.start()
        if opts.housekeeping and opts.vacuum_interval > 0:
            self._vacuumer = Vacuumer(dsn, interval=opts.vacuum_interval, purpose=f"worker {self.name}")
            self._vacuumer.start()
        self._housekeeping.start(dsn, prepare=opts.prepare)
        if opts.housekeeping:
            self._keeper = ScheduleKeeper(dsn, self.name, prepare=opts.prepare)
            self._keeper.start()
        self._executor.start()
        self._starter.start()
        self._completer.start()
        self._heartbeater.start()
        log.info(
            "worker %s started on %s: queues=%s concurrency=%d lease=%.0fs",
            self.name,
            describe(dsn),
            ",".join(opts.queues),
            opts.concurrency,
            opts.lease,
        )
        if is_embedded_fallback(dsn) and not sys.stdin.isatty():
            log.warning(
                "NO DATABASE CONFIGURED: this worker runs outside a terminal on the embedded PostgreSQL of this "
                "machine (%s); jobs enqueued into any other database never reach it. Set PGSCHED_DSN or pass --dsn.",
                describe(dsn),
            )
        try:
            self._claim_loop()
        finally:
            self._shutdown()
        return RECYCLE_EXIT_CODE if self._recycle else 0

    def _start_metrics(self) -> None:
        if self.options.metrics_port is None:
            return
        self._metrics_server = MetricsServer(
            worker_registry(self.metrics), host=self.options.metrics_host, port=self.options.metrics_port
        )
        try:
            self._metrics_server.start()
        except Exception:
            if self._claim_db is not None:
                self._claim_db.close()
            raise
        log.info("worker %s: Prometheus metrics at %s/metrics", self.name, self._metrics_server.url)

    @property
    def metrics_port(self) -> int | None:
        """The port serving this worker's /metrics (None when not serving)."""
        return None if self._metrics_server is None else self._metrics_server.port

    @property
    def _next_rollup(self) -> float:
        """When the worker's own housekeeping next rolls up queue history (monotonic; set it to bring that forward)."""
        return self._housekeeping.next_rollup

    @_next_rollup.setter
    def _next_rollup(self, at: float) -> None:
        self._housekeeping.next_rollup = at

    def _startup(self, conn: psycopg.Connection[Any]) -> None:
        import json

        if self.options.check_schema:
            from pgsched.db.schema import check_compatible

            check_compatible(conn)
        if self.app.tasks:
            conn.execute(queries.REGISTER_TASKS, [json.dumps([t.policy() for t in self.app.tasks.values()])])
        if self.app.schedules:
            sync_schedules(conn, self.app.schedules.values())
        conn.execute(
            queries.REGISTER_WORKER,
            (
                self.name,
                socket.gethostname(),
                os.getpid(),
                list(self.options.queues),
                list(self.options.labels),
                self.options.concurrency,
                VERSION,
                sorted(self.app.tasks),
                resource_limits(self.options.labels),
            ),
        )

    # -- claiming --------------------------------------------------------

    def _claim_loop(self) -> None:
        opts = self.options
        assert self._claim_db is not None
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self._housekeeping.tick(self._claim_db)
                held = len(self._held)
                free = self.capacity - held
                claimed = 0
                # Claim a batch once enough slots are free; fewer only when a
                # handler slot has been idle for a poll interval (behind long
                # jobs, the batch might never fill).
                idle_slot = held < opts.concurrency and time.monotonic() - self._last_claim >= opts.poll_interval
                if self._executor.loop_blocked:
                    pass  # claimed jobs would wait behind the blocked loop: leave them to other workers
                elif free >= self._threshold or (free > 0 and (held == 0 or idle_slot)):
                    self._last_claim = time.monotonic()
                    claimed = self._claim(min(free, opts.max_claim))
                    if claimed == min(free, opts.max_claim):
                        continue  # there is more: claim again as soon as slots free up
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                log.warning("claim failed (%s); reconnecting", exc)
                self._stopping.wait(0.5)
                continue
            if opts.burst and claimed == 0 and not len(self._held) and self._drained():
                log.info("no due work left: stopping (--burst)")
                break
            if self._rate_wait is not None:
                # Every queue is at its rate limit: no claim can start a job before
                # then, so wake-ups are no reason to claim again.
                wait, self._rate_wait = self._rate_wait, None
                if opts.burst:
                    log.info("--burst: every queue is at its rate limit; waiting %.1fs for the next start", wait)
                self._stopping.wait(wait)
                continue
            self._wake.wait(opts.poll_interval)

    def _claim(self, n: int) -> int:
        assert self._claim_db is not None
        self._shard_cursor += 1
        opts = self.options
        # Busy: a rotating start, so a worker of several queues serves them in
        # turn (the claim reads each queue's due jobs in one ordered scan).
        start_shard = None if not len(self._held) else self._shard_cursor

        # Jobs that will take a slot at once have their start recorded by the
        # claim itself (claim(..., starts => k): no start() statement, no second
        # row version): those with a free slot, and those the slots freeing up
        # take within START_TOLERANCE (at the recent rate); the others, and any
        # that wait longer after all, when a slot takes them (the starter).
        at_once = min(n, self._executor.slots_within(START_TOLERANCE))

        def run(conn: psycopg.Connection[Any]) -> list[tuple[ClaimedJob, str | None, float | None]]:
            names = self._queues.current(conn)
            claim_args = (self.name, names, n, timedelta(seconds=opts.lease), list(opts.labels), start_shard)
            if not at_once:
                with conn.cursor(row_factory=class_row(ClaimedJob)) as cur:
                    return [(job, None, None) for job in cur.execute(queries.CLAIM, claim_args).fetchall()]
            params = dict(zip(("worker", "queues", "n", "lease", "labels", "start_shard"), claim_args, strict=True))
            params.update(at_once=at_once, tasks=list(self.app.tasks))
            with conn.cursor(row_factory=tuple_row) as cur:
                return [claimed_row(row) for row in cur.execute(queries.CLAIM_AND_START, params).fetchall()]

        started = time.perf_counter()
        jobs = self._claim_db.call(run)
        self.metrics.claim_seconds.observe(time.perf_counter() - started)
        self._queues.claimed(n, len(jobs))
        if len(jobs) < n:
            self._check_rate_limits()
        claimed = len(jobs)
        unknown = [job for job, _, _ in jobs if job.task not in self.app.tasks]
        if unknown:
            self._passer.hand_back(self._claim_db, unknown)
            jobs = [entry for entry in jobs if entry[0].task in self.app.tasks]
        if not jobs:
            return claimed
        load = self._load_dependencies
        contexts = [job_context(job, self.name, outcome, timeout, load) for job, outcome, timeout in jobs]
        self._held.add(contexts)
        self.counts["claimed"] += len(jobs)
        claimed_at = time.monotonic()
        for ctx, due in zip(contexts, self.metrics.claimed_jobs([job for job, _, _ in jobs], opts.lease), strict=True):
            if due is not None:
                ctx._due_at_claim = (due, claimed_at)
        for ctx in contexts:
            ctx._stamped_at = claimed_at  # from here on, its wait for a slot counts against START_TOLERANCE
        self._executor.submit_many(contexts)
        return claimed

    def _check_rate_limits(self) -> None:
        """After a short claim: if every queue is at its rate limit, sleep until the next start is allowed.

        Asked at most once per poll interval while the answer is "no limit holds".
        """
        assert self._claim_db is not None
        now = time.monotonic()
        if now < self._next_rate_check:
            return
        names = self._queues.names if not self._queues.every else self._queues.current(self._claim_db.get())
        row = self._claim_db.call(lambda c: c.execute(queries.NEXT_START, (names,)).fetchone())
        wait = row[0] if row else None
        if wait is None:
            self._next_rate_check = now + self.options.poll_interval
        else:
            self._rate_wait = min(max(float(wait), 0.0), 60.0)
            log.debug("every queue is at its rate limit: next start in %.3fs", self._rate_wait)

    def _drained(self) -> bool:
        """For --burst, with nothing running here: whether to stop.

        Not while a completion of ours is still being written (it may release dependents), nor while anything is
        claimable, nor while due jobs wait only for a limit or a rate window to reopen (burst.py): those it
        waits for, saying so in the log.
        """
        assert self._claim_db is not None
        opts = self.options
        if self._completer is not None and not self._completer.drain(opts.poll_interval):
            return False
        conn = self._claim_db.get()
        conn.execute(queries.PROMOTE_DUE)
        if self._claim(min(self.capacity, opts.max_claim)) > 0:
            return False
        waiting = burst.held_back(conn, self._queues.current(conn), opts.labels)
        if not waiting:
            return True
        wait = opts.poll_interval if self._rate_wait is None else self._rate_wait
        said, now = burst.describe(waiting), time.monotonic()
        if said != self._burst_said or now - self._burst_said_at >= BURST_REPEAT:
            log.info("--burst: %s held back; checking again in %.1fs", said, wait)
            self._burst_said, self._burst_said_at = said, now
        return False

    # -- told by other threads ------------------------------------------

    def _slot_free(self, held: int) -> None:
        """A job was let go (its outcome is with the completer): claim again once enough slots are free."""
        if self.capacity - held >= self._threshold:
            self._wake.set()

    def _on_recycle(self, abandoned: int) -> None:
        if not self._recycle:
            log.error(
                "%d handler threads (or event loops) abandoned to handlers that overran or blocked them: recycling "
                "this worker (no new claims; running jobs get --shutdown-timeout to finish; then the process restarts)",
                abandoned,
            )
            self._recycle = True
            self.stop()

    # -- shutdown --------------------------------------------------------

    def _shutdown(self) -> None:
        opts = self.options
        self._stopping.set()
        unstarted = self._executor.take_unstarted()
        if self._starter is not None:
            unstarted += self._starter.close()  # took a slot, start not yet recorded: never started
        self._held.forget(unstarted)
        self._release(unstarted, "not started", ran=False)
        self._stop_services()

        deadline = time.monotonic() + (0 if self._forced else opts.shutdown_timeout)
        while len(self._held) and time.monotonic() < deadline and not self._forced:
            time.sleep(0.02)
        if len(self._held):
            # Ask the handlers to stop, give them a moment, then hand the jobs back.
            self._held.stop(self._held.contexts())
            grace = time.monotonic() + (0 if self._forced else min(2.0, max(0.2, opts.shutdown_timeout / 10)))
            while len(self._held) and time.monotonic() < grace:
                time.sleep(0.02)
            self._release(self._held.let_go(), "stopped, or still running, at the shutdown timeout")
        self._release(self._held.take_stopped(), "services stopped at shutdown")

        if self._completer is not None and not self._completer.close(timeout=10.0):
            log.error("some outcomes could not be written; those jobs will run again after their lease")
        if self._heartbeater is not None:
            self._heartbeater.close()
        if self._listener is not None:
            self._listener.close()
        if self._vacuumer is not None:
            self._vacuumer.close()
        if self._keeper is not None:
            self._keeper.close()
        self._housekeeping.close()
        self._executor.shutdown()
        self._giving_up.set()
        if self._claim_db is not None:
            try:
                self._claim_db.call(lambda c: c.execute(queries.UNREGISTER_WORKER, (self.name,)))
            except psycopg.Error as exc:
                log.warning("could not unregister worker %s: %s", self.name, exc)
            self._claim_db.close()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        log.info("worker %s stopped: %s", self.name, self.counts)

    def _stop_services(self) -> None:
        """Services never end by themselves: ask them to stop at once (handed back, to restart elsewhere)."""
        self._held.stop(
            [ctx for ctx in self._held.contexts() if getattr(self.app.tasks.get(ctx.task), "service", False)]
        )

    def _release(self, contexts: list[JobContext], why: str, *, ran: bool = True) -> None:
        """Hand jobs back; ``ran=False``: their handlers never ran (a start the claim recorded is withdrawn)."""
        if not contexts or self._claim_db is None:
            return
        ids = [c.id for c in contexts]
        tokens = [c.lease_token for c in contexts]
        flags = [ran] * len(contexts)
        try:
            rows = self._claim_db.call(lambda c: c.execute(queries.RELEASE, (ids, tokens, flags)).fetchall())
            log.info("handed back %d jobs (%s): %s", len(rows), why, dict(rows) if len(rows) <= 20 else "...")
        except psycopg.Error as exc:
            log.error("could not hand back %d jobs (%s): %s; their leases will expire", len(ids), why, exc)


# pgsched_worker_jobs_total{outcome} for the states complete()/fail()/snooze() report.
