"""Keeps a worker's leases alive: one heartbeat() statement for all its jobs, and the answers it brings back."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting

log = logging.getLogger(__name__)


class Heartbeater:
    """A thread that extends every held lease each ``interval`` seconds.

    ``held()`` gives the (job id, token) pairs to extend. For each job whose
    lease is no longer held, ``on_lost(job_id)`` is called; for each job whose
    cancellation was requested, ``on_cancel(job_id)``. When no heartbeat has
    succeeded for a whole lease, every held job is reported lost, since the
    database may have handed them to someone else. That holds also when the
    heartbeat neither succeeds nor fails but hangs (a network partition, a
    frozen server: nothing errors until TCP gives up, minutes later): a
    watchdog thread, which touches no connection, tells the handlers then.

    Cancel requests normally arrive by NOTIFY (the listener). While
    ``listening()`` is false (no LISTEN: --no-listen, a transaction-pooling
    PgBouncer, or the listener reconnecting), it also asks every
    ``cancel_poll`` seconds, between beats, which held jobs have a cancel
    request: a read-only statement, so cancels still arrive within about
    ``cancel_poll`` without extending leases that often.
    """

    def __init__(
        self,
        dsn: str,
        *,
        worker: str,
        lease: float,
        interval: float,
        held: Callable[[], list[tuple[int, int]]],
        on_lost: Callable[[int], None],
        on_cancel: Callable[[int], None],
        stop: threading.Event,
        prepare: bool = True,
        listening: Callable[[], bool] = lambda: False,
        cancel_poll: float = 0.5,
    ) -> None:
        self._db = Reconnecting(dsn, purpose="heartbeat", stop=stop, prepare=prepare)
        self._worker = worker
        self._lease = timedelta(seconds=lease)
        self._lease_s = lease
        self._interval = interval
        self._held = held
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self._stop = stop
        self._listening = listening
        self._cancel_poll = cancel_poll
        self.cancel_polls = 0
        self._kick = threading.Event()
        self._last_ok = time.monotonic()
        self._in_flight = False  # a beat() or a cancel poll is waiting for the database
        self.beats = 0
        self._thread = threading.Thread(target=self._loop, name="pgsched-heartbeat", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="pgsched-heartbeat-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._watchdog.start()

    def kick(self) -> None:
        """Beat now (e.g. right after a claim, so a cancel requested early is seen early)."""
        self._kick.set()

    def close(self) -> None:
        self._stop.set()
        self._kick.set()
        self._thread.join(timeout=2.0)
        self._db.close()

    def _loop(self) -> None:
        next_beat = time.monotonic() + self._interval
        while not self._stop.is_set():
            timeout = next_beat - time.monotonic()
            polling = not self._listening()
            if polling:
                timeout = min(timeout, self._cancel_poll)
            kicked = self._kick.wait(max(0.0, timeout))
            self._kick.clear()
            if self._stop.is_set():
                return
            try:
                if not kicked and time.monotonic() < next_beat:
                    if polling:
                        self.poll_cancels()
                    continue
                next_beat = time.monotonic() + self._interval
                self.beat()
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                silent = time.monotonic() - self._last_ok
                log.warning("heartbeat failed (%s); %.1fs since the last good one", exc, silent)
                if silent > self._lease_s:
                    for job_id, _token in self._held():
                        self._on_lost(job_id)
            except psycopg.Error:
                log.exception("heartbeat failed")

    def _watch(self) -> None:
        """Report every held job lost once a beat has hung for longer than the lease allows."""
        warned = False
        while not self._stop.wait(min(self._interval, 1.0)):
            silent = time.monotonic() - self._last_ok
            if self._in_flight and silent > self._lease_s:
                if not warned:
                    log.warning("heartbeat stuck for %.1fs (no answer from the database): leases presumed lost", silent)
                    warned = True
                for job_id, _token in self._held():
                    self._on_lost(job_id)
            elif not self._in_flight:
                warned = False

    def poll_cancels(self) -> None:
        """Report the held jobs whose cancellation was requested (reads only)."""
        pairs = self._held()
        if not pairs:
            return

        def run(conn: psycopg.Connection[Any]) -> list[tuple[int]]:
            return conn.execute(queries.CANCELS_REQUESTED, ([p[0] for p in pairs], [p[1] for p in pairs])).fetchall()

        self._in_flight = True  # a poll that hangs holds up the beats just as a hung beat does
        try:
            rows = self._db.call(run)
        finally:
            self._in_flight = False
        self.cancel_polls += 1
        for (job_id,) in rows:
            self._on_cancel(job_id)

    def beat(self) -> None:
        pairs = self._held()
        started = time.monotonic()

        def run(conn: psycopg.Connection[Any]) -> list[tuple[int, bool, bool]]:
            return conn.execute(
                queries.HEARTBEAT,
                ([p[0] for p in pairs], [p[1] for p in pairs], self._lease, self._worker),
            ).fetchall()

        self._in_flight = True
        try:
            rows = self._db.call(run)
        finally:
            self._in_flight = False
        self._last_ok = started
        self.beats += 1
        for job_id, held, cancel_requested in rows:
            if not held:
                self._on_lost(job_id)
            elif cancel_requested:
                self._on_cancel(job_id)
