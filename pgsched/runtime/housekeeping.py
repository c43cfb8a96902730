"""A worker's own housekeeping, for a cluster without a scanner: due jobs promoted, dead leases expired,
partitions maintained, queue history rolled up; and a warning now and then about queues nobody serves."""

from __future__ import annotations

import logging
import random
import threading
import time

import psycopg

from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting
from pgsched.runtime.routing import warn_unserved

log = logging.getLogger("pgsched.runtime.worker")  # the worker's lines

UNSERVED_CHECK_INTERVAL = 300.0  # seconds between warnings about queues no live worker serves
#: A lease expiry pass starts no sooner than this many times its last one's length after it: while something
#: pins the xmin horizon, the pass reads every dead index entry of the jobs run since (a second and more at
#: thousands of jobs a second), and at most this share of a core goes to it.
EXPIRY_SPACING = 20.0


def spaced(usual: float, took: float) -> float:
    """Seconds until the next pass of a duty that usually runs every ``usual`` seconds and last took ``took``."""
    return max(usual, EXPIRY_SPACING * took)


class LoneHousekeeping:
    """Each duty at its own interval (``enabled``: the worker's --housekeeping), on a thread and a connection of
    its own: a duty that takes long (expiring leases reads every dead index entry of the running jobs while
    something pins the xmin horizon) never holds up the claim loop, so it costs no job its pickup time. The
    claim loop only warns, now and then, about queues nobody serves (tick)."""

    def __init__(self, worker: str, *, enabled: bool, poll_interval: float, lease: float) -> None:
        self.worker = worker
        self.enabled = enabled
        self.poll_interval = poll_interval
        self.lease = lease
        self._next_unserved_check = 0.0
        self._next_housekeeping = 0.0
        self._next_expiry = 0.0
        self._next_maintain = 0.0
        self.next_rollup = 0.0
        self._stop = threading.Event()
        self._db: Reconnecting | None = None
        self._thread: threading.Thread | None = None

    def start(self, dsn: str, *, prepare: bool) -> None:
        """Start the duties' thread (nothing to start without --housekeeping)."""
        if not self.enabled:
            return
        self._db = Reconnecting(dsn, purpose=f"worker {self.worker} housekeeping", stop=self._stop, prepare=prepare)
        self._thread = threading.Thread(target=self._loop, name="pgsched-housekeeping", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._db is not None:
            self._db.close()

    def _loop(self) -> None:
        assert self._db is not None
        while not self._stop.is_set():
            try:
                self.run_duties(self._db)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not self._stop.is_set():
                    log.warning("housekeeping failed (%s); trying again later", exc)
                self._db.discard()
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning("housekeeping failed: %s", exc)
            # Until the next pass is due (a poll interval after the last one began), never later.
            self._stop.wait(max(0.01, self._next_housekeeping - time.monotonic()))

    def tick(self, claim_db: Reconnecting | None) -> None:
        """From the claim loop: now and then, a warning about queues no live worker serves."""
        now = time.monotonic()
        if now >= self._next_unserved_check and claim_db is not None:
            self._next_unserved_check = now + UNSERVED_CHECK_INTERVAL
            warn_unserved(claim_db.get(), self.worker)

    def run_duties(self, db: Reconnecting) -> None:
        """Without a scanner, workers keep the promises themselves: due jobs promoted, dead leases expired."""
        now = time.monotonic()
        if now < self._next_housekeeping:
            return
        conn = db.get()
        # Jittered a little (never later than a poll interval), so workers started together spread their passes.
        self._next_housekeeping = now + self.poll_interval * (0.9 + 0.1 * random.random())
        conn.execute(queries.PROMOTE_DUE)
        if now >= self._next_expiry:
            began = time.monotonic()
            expired = conn.execute(queries.EXPIRE_LEASES).fetchone()
            usual, took = max(1.0, self.lease / 4), time.monotonic() - began
            wait = spaced(usual, took)
            self._next_expiry = began + wait
            if wait > usual:
                log.debug("expiring leases took %.3fs: the next pass in %.1fs", took, wait)
            if expired and expired[0]:
                log.info("expired %d leases of dead or stalled workers", expired[0])
        if now >= self._next_maintain:
            self._next_maintain = now + 3600
            conn.execute(queries.MAINTAIN)
        if now >= self.next_rollup:
            self.next_rollup = now + 60  # scanners roll up every 15 s; this covers a cluster without one
            conn.execute(queries.ROLLUP_QUEUE_HISTORY)
