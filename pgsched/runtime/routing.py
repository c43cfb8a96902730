"""Which queues a worker claims from: the names it was given, or with '*' every queue that has due jobs now.

``pgsched.claim()`` takes queue names. A worker started with ``--queues '*'``
keeps '*' in its registration (``pgsched.workers_live`` shows it, and the
unserved-queue check counts it as serving everything) and claims from the
queues that hold due jobs, read again at most every ``refresh`` seconds and
whenever a claim came back short, so a queue that appears later is served
within one poll interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Final

import psycopg

from pgsched.db import queries

log = logging.getLogger(__name__)

ALL: Final = "*"


class ClaimQueues:
    """The queue list for the next claim."""

    def __init__(self, queues: Sequence[str], *, refresh: float = 1.0) -> None:
        self.names = list(dict.fromkeys(queues))
        self.every = ALL in self.names
        self.refresh = refresh
        self._found: list[str] = []
        self._read_at = -float("inf")
        self._stale = True

    def current(self, conn: psycopg.Connection[Any]) -> list[str]:
        """The names to pass to claim(); with '*', the queues holding due jobs now (cached briefly)."""
        if not self.every:
            return self.names
        now = time.monotonic()
        if self._stale or now - self._read_at >= self.refresh:
            self._found = [row[0] for row in conn.execute(queries.DUE_QUEUES).fetchall()]
            self._read_at = now
            self._stale = False
        return self._found

    def claimed(self, asked: int, got: int) -> None:
        """After a claim: a short one (the listed queues ran dry, or a new queue may have work) reads again."""
        if got < asked:
            self._stale = True


def warn_unserved(conn: psycopg.Connection[Any], worker: str) -> list[str]:
    """Log a warning naming each unpaused queue with due jobs that no live worker serves; returns the names."""
    try:
        rows = conn.execute(queries.UNSERVED_QUEUES).fetchall()
    except (psycopg.OperationalError, psycopg.InterfaceError):
        raise  # the connection broke: the caller reconnects
    except psycopg.Error as exc:  # e.g. a role that may not read the views: nothing to warn about
        log.debug("could not check for unserved queues: %s", exc)
        return []
    for queue, available, age in rows:
        log.warning(
            "queue %r has %d due jobs (oldest waiting %.0fs) and no live worker serves it: start one with "
            "--queues %s (or '*'), or pause the queue",
            queue,
            available,
            age or 0.0,
            queue,
            extra={"queue": queue, "worker": worker},
        )
    return [row[0] for row in rows]
