"""Writes run outcomes back in batches: one complete() per batch, fenced by each job's token."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgsched.core.outcome import Kind, Outcome
from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting

log = logging.getLogger(__name__)


class _RawJson(Jsonb):
    """JSON text already serialized by the handler's thread."""

    def __init__(self, text: str) -> None:
        super().__init__(None, dumps=lambda _: text)


class Completer:
    """A thread that flushes outcomes: completions in one statement per batch, the rest one by one.

    A batch is written when ``max_batch`` outcomes wait or ``flush_interval``
    has passed since the first one arrived. A write that fails for a dropped
    connection is retried after reconnecting (complete() is fenced, so a
    repeat after a lost reply is harmless); outcomes still unwritten when the
    worker gives up are covered by lease expiry.
    """

    def __init__(
        self,
        dsn: str,
        *,
        stop: threading.Event,
        on_written: Callable[[Outcome, str], None],
        prepare: bool = True,
        max_batch: int = 1000,
        flush_interval: float = 0.002,
    ) -> None:
        self._db = Reconnecting(dsn, purpose="completer", stop=stop, prepare=prepare)
        self._stop = stop
        self._on_written = on_written
        self._max_batch = max_batch
        self._flush_interval = flush_interval
        self._pending: list[Outcome] = []
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False
        self._thread = threading.Thread(target=self._loop, name="pgsched-completer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, outcome: Outcome) -> None:
        with self._cond:
            self._pending.append(outcome)
            if len(self._pending) == 1 or len(self._pending) >= self._max_batch:
                self._cond.notify()

    def pending_jobs(self) -> list[tuple[int, int]]:
        """(job id, token) of outcomes not yet written: their leases must be kept alive."""
        with self._cond:
            return [(o.job.id, o.job.lease_token) for o in self._pending]

    def drain(self, timeout: float) -> bool:
        """Wait until everything submitted is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._cond.notify()
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, timeout: float) -> bool:
        flushed = self.drain(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout=1.0)
        self._db.close()
        return flushed

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if self._closing and not self._pending:
                    return
                if len(self._pending) < self._max_batch and not self._closing:
                    # Let a few more arrive: one statement for many jobs.
                    self._cond.wait(self._flush_interval)
                batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch :]
                self._busy = True
            try:
                self._write(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, batch: list[Outcome]) -> None:
        completes = [o for o in batch if o.kind is Kind.COMPLETE]
        others = [o for o in batch if o.kind is not Kind.COMPLETE and o.kind is not Kind.DISCARD]
        while True:
            try:
                if completes:
                    self._write_completes(completes)
                    completes = []
                while others:
                    self._write_other(others[0])
                    others.pop(0)
                return
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if self._stop.is_set():
                    log.error(
                        "giving up on writing %d outcomes (%s); their leases will expire and the jobs will run again",
                        len(completes) + len(others),
                        exc,
                    )
                    return
                log.warning("writing outcomes failed (%s); retrying after reconnect", exc)
                self._stop.wait(0.2)
            except psycopg.Error as exc:
                log.exception("writing outcomes failed: %s; their leases will expire", exc)
                return

    def _write_completes(self, batch: list[Outcome]) -> None:
        def run(conn: psycopg.Connection[Any]) -> list[tuple[int, bool]]:
            return conn.execute(
                queries.COMPLETE,
                (
                    [o.job.id for o in batch],
                    [o.job.lease_token for o in batch],
                    [None if o.result is None else _RawJson(o.result) for o in batch],
                    [o.job.shard for o in batch],
                ),
            ).fetchall()

        accepted = dict(self._db.call(run))
        for outcome in batch:
            self._on_written(outcome, "completed" if accepted.get(outcome.job.id) else "lease_lost")

    def _write_other(self, outcome: Outcome) -> None:
        job = outcome.job

        def run(conn: psycopg.Connection[Any]) -> str:
            if outcome.kind is Kind.SNOOZE:
                row = conn.execute(queries.SNOOZE, (job.id, job.lease_token, outcome.delay)).fetchone()
            else:
                row = conn.execute(
                    queries.FAIL,
                    (
                        job.id,
                        job.lease_token,
                        outcome.error or "",
                        outcome.delay if outcome.kind is Kind.RETRY_AT else None,
                        outcome.kind is Kind.DEAD,
                        outcome.result,
                    ),
                ).fetchone()
            assert row is not None
            return str(row[0])

        self._on_written(outcome, self._db.call(run))
