"""LISTEN for wake-ups on a connection of its own: a hint that work is due, never the delivery."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable

import psycopg

from pgsched.db.dbconn import connect_options

log = logging.getLogger(__name__)

CHANNEL = "pgsched_jobs"
CANCEL_CHANNEL = "pgsched_cancel"  # payload: the id of a running job whose cancel was requested


class Listener:
    """A thread that calls ``wake()`` when a NOTIFY names one of ``queues`` (or after reconnecting).

    The connection runs nothing but LISTEN (psycopg's notifies() holds the
    connection while it waits, so sharing it would stall queries). After each
    (re)connect it checks that a notification actually comes back; when it
    does not (a transaction-pooling PgBouncer in between), it says so once and
    stops, leaving the worker to its poll interval. ``available`` tells which.

    With ``on_cancel``, it also listens on pgsched_cancel and calls
    ``on_cancel(job_id)`` for each cancel request; ``on_connect()`` runs after
    each (re)connect, once listening, so the caller can look up what was
    missed while the connection was down.
    """

    def __init__(
        self,
        dsn: str,
        queues: Iterable[str],
        wake: Callable[[], None],
        *,
        stop: threading.Event,
        channel: str = CHANNEL,
        probe_timeout: float = 2.0,
        on_cancel: Callable[[int], None] | None = None,
        on_connect: Callable[[], None] | None = None,
    ) -> None:
        self._dsn = dsn
        self._queues = frozenset(queues)
        self._wake = wake
        self._stop = stop
        self._channel = channel
        self._probe_timeout = probe_timeout
        self._on_cancel = on_cancel
        self._on_connect = on_connect
        self.available: bool | None = None
        self.connected = threading.Event()
        self.reconnects = 0
        self._conn: psycopg.Connection[object] | None = None
        self._thread = threading.Thread(target=self._loop, name="pgsched-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.cancel_safe(timeout=1.0)
            except Exception:
                pass
        self._thread.join(timeout=2.0)

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                options = connect_options(self._dsn, "pgsched listener")
                with psycopg.connect(self._dsn, autocommit=True, connect_timeout=10, **options) as conn:
                    self._conn = conn
                    conn.execute(f"LISTEN {self._channel}")
                    if self.available is None:
                        # A busy machine can delay even a delivered notification past one
                        # probe's wait: only repeated silence means NOTIFY cannot arrive.
                        for attempt in range(3):
                            self.available = self._probe(conn, self._probe_timeout * 2**attempt)
                            if self.available or self._stop.is_set():
                                break
                        if not self.available:
                            log.warning(
                                "LISTEN/NOTIFY does not work on this connection (a transaction-pooling "
                                "PgBouncer?); the worker polls for work instead"
                            )
                            return
                    if self._on_cancel is not None:
                        conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                    self.connected.set()
                    if self._on_connect is not None:
                        self._on_connect()
                    if failures:
                        log.info("listener reconnected")
                    failures = 0
                    # Catch up on anything that arrived while we were not listening.
                    self._wake()
                    self._listen(conn)
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop.is_set():
                    return
                failures += 1
                self.reconnects += 1
                delay = min(5.0, 0.1 * 2 ** min(failures, 6))
                log.warning("listener connection lost (%s); reconnecting in %.1fs", exc, delay)
                self._stop.wait(delay)
            finally:
                self._conn = None

    def _listen(self, conn: psycopg.Connection[object]) -> None:
        last_check = time.monotonic()
        while not self._stop.is_set():
            # Short waits: close() is noticed within one (notifies() cannot be interrupted).
            for note in conn.notifies(timeout=0.25):
                if note.channel == CANCEL_CHANNEL:
                    if self._on_cancel is not None and note.payload.isdigit():
                        self._on_cancel(int(note.payload))
                elif note.payload in self._queues or "*" in self._queues or not note.payload:
                    self._wake()
            if time.monotonic() - last_check > 10.0:
                # A silent half-open connection raises here instead of waiting forever.
                conn.execute("SELECT 1")
                last_check = time.monotonic()

    def _probe(self, conn: psycopg.Connection[object], timeout: float) -> bool:
        probe = f"pgsched_probe_{os.getpid()}_{threading.get_ident() % 100000}"
        conn.execute(f"LISTEN {probe}")
        # The NOTIFY must come from another session, as real ones do: behind a
        # transaction-pooling PgBouncer a session's NOTIFY to itself comes
        # back (it is delivered as its own transaction commits), while those
        # of other sessions never reach it.
        options = connect_options(self._dsn, "pgsched listener probe")
        with psycopg.connect(self._dsn, autocommit=True, connect_timeout=10, **options) as sender:
            sender.execute("SELECT pg_notify(%s, 'probe')", [probe])
        deadline = time.monotonic() + timeout
        ok = False
        while time.monotonic() < deadline and not ok:
            for note in conn.notifies(timeout=max(0.01, deadline - time.monotonic()), stop_after=1):
                ok = note.channel == probe
        conn.execute(f"UNLISTEN {probe}")
        return ok
