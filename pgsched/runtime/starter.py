"""Records handler starts: one start() statement per batch of jobs taking a slot, fenced by each job's token.

A job is claimed when a slot is about to free up, so it may wait a while
leased but not running. Right before its handler runs, the worker writes
its start (``started_at``, the database's clock) under its token, which also
tells the worker whether the job was cancelled or lost meanwhile: such a job
never starts. Starts that arrive while a statement is in flight go together
in the next one, so a busy worker pays one round trip per batch of starts.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from pgsched.core.job import JobContext
from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting

log = logging.getLogger(__name__)


class Starter:
    """A thread that stamps jobs as started, then hands them to ``launch``.

    ``submit(contexts)`` never blocks. For each job, start() says 'started'
    (launched as is), 'cancel_requested' (launched with its cancel flag set,
    so the executor ends it cancelled without running it) or 'lease_lost'
    (launched lost: nothing runs, nothing is written). When the statement
    itself fails for a reason other than the connection, the jobs run
    anyway, unstamped: a start that cannot be recorded is no reason to hold
    work back.
    """

    def __init__(
        self,
        dsn: str,
        *,
        launch: Callable[[list[JobContext]], None],
        stop: threading.Event,
        prepare: bool = True,
        max_batch: int = 1000,
    ) -> None:
        self._db = Reconnecting(dsn, purpose="starter", stop=stop, prepare=prepare)
        self._launch = launch
        self._stop = stop
        self._max_batch = max_batch
        self._pending: list[JobContext] = []
        self._cond = threading.Condition()
        self._closing = False
        self.statements = 0
        self._thread = threading.Thread(target=self._loop, name="pgsched-starter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, contexts: list[JobContext]) -> None:
        with self._cond:
            self._pending.extend(contexts)
            self._cond.notify()

    def close(self) -> list[JobContext]:
        """Stop; returns the jobs that were never stamped nor launched (to hand back)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        with self._cond:
            left, self._pending = self._pending, []
        self._db.close()
        return left

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch :]
            if not self._stamp(batch):
                with self._cond:  # given up (stopping while disconnected): hand them back at close
                    self._pending[:0] = batch
                return
            self._launch(batch)

    def _stamp(self, batch: list[JobContext]) -> bool:
        """Record the batch's starts and set each refused job's flags; False when giving up."""
        while True:
            live = [ctx for ctx in batch if not ctx.should_stop]
            if not live:
                return True

            params = ([c.id for c in live], [c.lease_token for c in live], [c.job.shard for c in live])
            try:
                rows = self._db.call(functools.partial(_start, params=params))
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if self._stop.is_set() or self._closing:
                    return False
                log.warning("recording %d job starts failed (%s); retrying after reconnect", len(live), exc)
                self._stop.wait(0.2)
                continue
            except psycopg.Error as exc:
                log.error("recording %d job starts failed (%s); running them anyway", len(live), exc)
                return True
            self.statements += 1
            by_id = {ctx.id: ctx for ctx in live}
            for job_id, outcome, timeout in rows:
                ctx = by_id[job_id]
                ctx.timeout = timeout
                if outcome == "cancel_requested":
                    log.info("job %s: cancelled before it started", job_id, extra={"job_id": job_id})
                    ctx._request_cancel()
                elif outcome == "lease_lost":
                    log.warning("job %s: lease lost before it started", job_id, extra={"job_id": job_id})
                    ctx._mark_lease_lost()
            return True


def _start(
    conn: psycopg.Connection[Any], params: tuple[list[int], list[int], list[int]]
) -> list[tuple[int, str, float | None]]:
    return conn.execute(queries.START, params).fetchall()
