"""Where running handlers' progress reports and durable steps go: the worker's journal, and the drain's.

``ctx.progress()`` only marks its context pending (a few attribute writes,
however often a handler calls it). The worker's ``Journal`` has one thread
that sends every pending report in one ``pgsched.report_progress``
statement, then waits a second: at most one statement a second for all the
worker's jobs, each job's latest report in it. ``ctx.step()`` reads the
job's recorded steps once per run and records each new one with
``pgsched.record_step``, both fenced by the lease token. The connection and
the thread start with the first use, so a worker whose handlers use neither
costs nothing. A child of ``--pool process`` keeps its own journal.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg

from pgsched.core.job import JobContext
from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting
from pgsched.errors import LeaseLost, from_psycopg
from pgsched.runtime.completer import _RawJson

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 1.0  # seconds between progress statements of one worker
STEP_TRIES = 3  # a step's result is recorded again (idempotently) after a dropped connection


def load_steps(conn: psycopg.Connection[Any], ctx: JobContext) -> dict[str, Any]:
    """The recorded steps of ctx's job by name; LeaseLost when ctx's token is no longer the job's."""
    row = conn.execute(queries.JOB_STEPS, (ctx.id, ctx.job.shard, ctx.lease_token)).fetchone()
    if row is None:
        raise LeaseLost(f"job {ctx.id}: lease lost (token {ctx.lease_token} is stale); its steps are not read")
    return {step["name"]: step["result"] for step in row[0] or ()}


def record_step(conn: psycopg.Connection[Any], ctx: JobContext, name: str, result: str) -> None:
    """Record one step's result; LeaseLost when the database refused it as stale."""
    row = conn.execute(queries.RECORD_STEP, (ctx.id, ctx.lease_token, name, _RawJson(result))).fetchone()
    if row is None or row[0] == "lease_lost":
        raise LeaseLost(f"job {ctx.id}: lease lost (token {ctx.lease_token} is stale); step {name!r} not recorded")


class Journal:
    """A worker's progress and steps: one lazily opened connection, one lazily started progress thread."""

    def __init__(self, dsn: str, *, prepare: bool = True, interval: float = PROGRESS_INTERVAL) -> None:
        self._stop = threading.Event()
        self._db = Reconnecting(dsn, purpose="journal", stop=self._stop, prepare=prepare)
        self._db_lock = threading.Lock()
        self._interval = interval
        self._lock = threading.Lock()
        self._pending: dict[int, JobContext] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.statements = 0  # report_progress statements sent
        self.reports = 0  # reports the database kept

    # -- the handlers' side ---------------------------------------------

    def attach(self, ctx: JobContext) -> None:
        ctx._journal = self

    def progress(self, ctx: JobContext) -> None:
        with self._lock:
            self._pending[ctx.id] = ctx
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._loop, name="pgsched-progress", daemon=True)
                self._thread.start()
        self._wake.set()

    def steps(self, ctx: JobContext) -> dict[str, Any]:
        found: dict[str, Any] = self._call(lambda conn: load_steps(conn, ctx))
        return found

    def record(self, ctx: JobContext, name: str, result: str) -> None:
        self._call(lambda conn: record_step(conn, ctx, name, result))

    def resource_limits(self, ctx: JobContext) -> tuple[int | None, float | None]:
        """A service job's memory_limit (MiB) and cpu_limit (CPUs), read when its run starts (--pool process)."""

        def run(conn: psycopg.Connection[Any]) -> tuple[int | None, float | None]:
            row = conn.execute(queries.JOB_LIMITS, (ctx.id, ctx.job.shard)).fetchone()
            return (None, None) if row is None else (row[0], row[1])

        found: tuple[int | None, float | None] = self._call(run)
        return found

    def settle(self, ctx: JobContext) -> None:
        if ctx._progress_pending and not ctx.lease_lost:
            with self._lock:
                self._pending.pop(ctx.id, None)
            self._send([ctx])

    def _call(self, fn: Any) -> Any:
        for attempt in range(1, STEP_TRIES + 1):
            try:
                with self._db_lock:
                    return self._db.call(fn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if attempt == STEP_TRIES:
                    raise from_psycopg(exc) from exc
                time.sleep(0.2 * attempt)
            except psycopg.Error as exc:
                raise from_psycopg(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the progress thread --------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            self.flush()
            self._stop.wait(self._interval)

    def flush(self) -> None:
        """Send every pending report in one statement (the progress thread, and tests)."""
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        self._send(pending)

    def _send(self, pending: list[JobContext]) -> None:
        reports: list[tuple[JobContext, tuple[float, str | None]]] = []
        for ctx in pending:
            if not ctx._progress_pending:
                continue  # taken already (settled when its run ended)
            report = ctx._take_progress()
            if report is not None and not ctx.lease_lost:
                reports.append((ctx, report))
        if not reports:
            return

        def run(conn: psycopg.Connection[Any]) -> list[tuple[int, bool]]:
            return conn.execute(
                queries.REPORT_PROGRESS,
                (
                    [ctx.id for ctx, _ in reports],
                    [ctx.lease_token for ctx, _ in reports],
                    [report[0] for _, report in reports],
                    [report[1] for _, report in reports],
                ),
            ).fetchall()

        try:
            with self._db_lock:
                rows = self._db.call(run)
        except psycopg.Error as exc:
            log.warning("could not write the progress of %d jobs: %s", len(reports), exc)
            return
        self.statements += 1
        self.reports += sum(1 for _, kept in rows if kept)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2.0)
        with self._db_lock:
            self._db.close()


class ConnJournal:
    """The journal of ``App.drain()``: the drain's own connection, progress sent at most once a second."""

    def __init__(self, conn: psycopg.Connection[Any], interval: float = PROGRESS_INTERVAL) -> None:
        self._conn = conn
        self._interval = interval
        self._sent = 0.0

    def progress(self, ctx: JobContext) -> None:
        if time.monotonic() - self._sent >= self._interval:
            self.settle(ctx)

    def settle(self, ctx: JobContext) -> None:
        """Send ctx's latest report if one is pending (also when its run ends)."""
        if not ctx._progress_pending:
            return
        report = ctx._take_progress()
        if report is None:
            return
        self._sent = time.monotonic()
        self._conn.execute(queries.REPORT_PROGRESS, ([ctx.id], [ctx.lease_token], [report[0]], [report[1]]))

    def steps(self, ctx: JobContext) -> dict[str, Any]:
        return load_steps(self._conn, ctx)

    def record(self, ctx: JobContext, name: str, result: str) -> None:
        record_step(self._conn, ctx, name, result)
