"""Child processes for sync handlers (``pgsched worker --pool process``): one job at a time each, killed on overrun.

A slot of the worker owns one child, started with the ``spawn`` method (a
fresh interpreter that imports the app by its ``module:attribute``, so no
thread or connection of the worker is inherited). The slot sends it a job,
waits for the outcome, and kills the child when the run overruns its
timeout, or is cancelled, lost or stopped; the next job gets a new child.
A child exits when its worker goes away (its pipe closes, or its parent
process changes).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from pgsched.core.job import ClaimedJob, JobContext
from pgsched.core.outcome import Kind, Outcome, timed_out
from pgsched.core.registry import Registry
from pgsched.runtime import dependencies
from pgsched.runtime.limits import RunLimits, mechanism

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0  # seconds a new child may take to import the app
KILL_GRACE = 1.0  # seconds between SIGTERM and SIGKILL when a run is stopped (timeouts get SIGKILL at once)


class ChildSlot:
    """One handler slot backed by one child process."""

    def __init__(self, app_ref: str, *, dsn: Callable[[], str | None], name: str) -> None:
        self._app_ref = app_ref
        self._dsn = dsn
        self._name = name
        self._proc: Any = None  # multiprocessing.context.SpawnProcess
        self._conn: multiprocessing.connection.Connection | None = None
        self._last_exit: int | None = None  # the exit code of a child that died running a job
        self.started = 0  # children started so far

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else int(self._proc.pid)

    def ensure(self) -> None:
        """Start the child if there is none alive; raises RuntimeError when it cannot load the app."""
        if self._proc is not None and self._proc.is_alive():
            return
        self._reap()
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        proc = context.Process(
            target=_child_main, args=(self._app_ref, self._dsn(), child, os.getpid()), name=self._name, daemon=True
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.started += 1
        if not parent.poll(START_TIMEOUT):
            self._kill(at_once=True)
            raise RuntimeError(f"the handler process did not load {self._app_ref} within {START_TIMEOUT:.0f}s")
        try:
            kind, detail = parent.recv()
        except EOFError:
            kind, detail = "error", f"exit code {proc.exitcode}"
        if kind != "ready":
            self._kill(at_once=True)
            raise RuntimeError(f"the handler process could not load {self._app_ref}: {detail}")

    def run(self, ctx: JobContext, limit: float | None, limits: RunLimits | None = None) -> Outcome | None:
        """Run the job in the child; None when it was stopped (cancelled, lost, shutdown) and the child killed.

        With ``limits`` (a service's memory_limit / cpu_limit), the child runs the job confined to them (a
        cgroup, else rlimits) and is replaced afterwards; a child the OOM killer ended fails the run with
        "killed: memory limit N MiB exceeded".
        """
        try:
            self.ensure()
        except RuntimeError as exc:
            return Outcome(ctx.job, Kind.FAIL, error=str(exc))
        if limits is None or (limits.memory_mib is None and limits.cpus is None):
            return self._run(ctx, limit)
        assert self.pid is not None
        try:
            confined = mechanism().confine(self.pid, limits, f"run-{ctx.id}-{ctx.lease_token}-{os.getpid()}")
        except OSError as exc:
            log.warning("job %s: could not confine its handler process (%s); it runs unlimited", ctx.id, exc)
            return self._run(ctx, limit)
        try:
            outcome = self._run(ctx, limit)
            code = self._last_exit
        finally:
            self._kill(at_once=True)  # it leaves the groups with its life; the next job gets a new child
        usage = confined.finish(code)
        if usage["oom_killed"]:
            return Outcome(ctx.job, Kind.FAIL, error=f"killed: memory limit {limits.memory_mib} MiB exceeded")
        return outcome

    def _run(self, ctx: JobContext, limit: float | None) -> Outcome | None:
        self._last_exit = None
        assert self._conn is not None
        assert self._proc is not None
        try:
            self._conn.send((ctx.job, ctx.worker, ctx.timeout))
        except OSError as exc:
            self._kill(at_once=True)
            return Outcome(ctx.job, Kind.FAIL, error=f"the handler process could not take the job: {exc}")
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            if self._conn.poll(wait):
                try:
                    outcome: Outcome = self._conn.recv()
                except (EOFError, OSError):
                    return self._died(ctx)
                return outcome
            if not self._proc.is_alive():
                return self._died(ctx)
            if deadline is not None and time.monotonic() >= deadline:
                pid = self.pid
                self._kill(at_once=True)
                assert limit is not None
                ctx._mark_timed_out()
                log.error(
                    "job %s: handler process %s killed after the %g s timeout",
                    ctx.id,
                    pid,
                    limit,
                    extra={"job_id": ctx.id, "task": ctx.task},
                )
                return timed_out(ctx.job, limit)
            if ctx.should_stop:
                self._kill(at_once=False)
                return None

    def close(self) -> None:
        """Ask the child to exit (it finishes nothing: the worker hands its jobs back first)."""
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
        self._kill(at_once=False)

    def _died(self, ctx: JobContext) -> Outcome:
        if self._proc is not None:
            self._proc.join(1.0)  # its pipe closed as it died: take its exit code
        code = None if self._proc is None else self._proc.exitcode
        self._last_exit = code
        self._reap()
        return Outcome(ctx.job, Kind.FAIL, error=f"the process running the handler died (exit code {code})")

    def _kill(self, *, at_once: bool) -> None:
        proc = self._proc
        if proc is not None and proc.is_alive():
            if at_once:
                proc.kill()
            else:
                proc.terminate()
                proc.join(KILL_GRACE)
                if proc.is_alive():
                    proc.kill()
            proc.join(5.0)
        self._reap()

    def _reap(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None


def _child_main(app_ref: str, dsn: str | None, conn: multiprocessing.connection.Connection, parent: int) -> None:
    """The child: load the app, then run the jobs the slot sends, one at a time, until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the worker's to handle
    threading.Thread(target=_exit_with_parent, args=(parent,), name="pgsched-parent-watch", daemon=True).start()
    try:
        import asyncio

        from pgsched.core.loader import load_registry
        from pgsched.runtime.handler import _await, run_sync
        from pgsched.runtime.journal import Journal

        # The user's App, loaded by its import path as `pgsched worker --app` does.
        app: Registry = load_registry(app_ref)
        if dsn is not None:
            app.configure(dsn)
    except BaseException as exc:  # reported to the worker, which fails the job with it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    journal = None if dsn is None else Journal(dsn, prepare=False)  # connects at the first progress or step
    load_dependencies = dependencies.from_dsn(app.dsn)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        job, worker, timeout = message
        assert isinstance(job, ClaimedJob)
        ctx = JobContext(
            job=job,
            worker=worker,
            timeout=timeout,
            _journal=journal,
            _load_dependencies=load_dependencies,
        )
        outcome = run_sync(app.tasks.get(job.task), ctx, lambda value: asyncio.run(_await(value)))
        try:
            conn.send(outcome)
        except OSError:
            return


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)
