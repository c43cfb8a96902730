"""A worker's own housekeeping, for a cluster without a scanner: due jobs promoted, dead leases expired,
partitions maintained, queue history rolled up; and a warning now and then about queues nobody serves."""

from __future__ import annotations

import logging
import time

from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting
from pgsched.runtime.routing import warn_unserved

log = logging.getLogger("pgsched.runtime.worker")  # the worker's lines

UNSERVED_CHECK_INTERVAL = 300.0  # seconds between warnings about queues no live worker serves


class LoneHousekeeping:
    """Run from the worker's claim loop; each duty at its own interval (``enabled``: the worker's --housekeeping)."""

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

    def tick(self, claim_db: Reconnecting | None) -> None:
        """Without a scanner, workers keep the promises themselves: due jobs promoted, dead leases expired."""
        now = time.monotonic()
        if now >= self._next_unserved_check and claim_db is not None:
            self._next_unserved_check = now + UNSERVED_CHECK_INTERVAL
            warn_unserved(claim_db.get(), self.worker)
        if not self.enabled:
            return
        if now < self._next_housekeeping:
            return
        assert claim_db is not None
        conn = claim_db.get()
        self._next_housekeeping = now + self.poll_interval
        conn.execute(queries.PROMOTE_DUE)
        if now >= self._next_expiry:
            self._next_expiry = now + max(1.0, self.lease / 4)
            expired = conn.execute(queries.EXPIRE_LEASES).fetchone()
            if expired and expired[0]:
                log.info("expired %d leases of dead or stalled workers", expired[0])
        if now >= self._next_maintain:
            self._next_maintain = now + 3600
            conn.execute(queries.MAINTAIN)
        if now >= self.next_rollup:
            self.next_rollup = now + 60  # scanners roll up every 15 s; this covers a cluster without one
            conn.execute(queries.ROLLUP_QUEUE_HISTORY)
