"""Keeps the hot table lean and its plans right: VACUUM / ANALYZE of pgsched.jobs' partitions when needed.

Every job leaves two dead row versions in pgsched.jobs (one when it is
claimed, one when it finishes). Autovacuum comes round at most once per
``autovacuum_naptime`` (a minute by default), so a queue running thousands of
jobs a second carries hundreds of thousands of them between visits, and every
claim's index scan steps over them. Workers and scanners run this thread: every
``interval`` seconds it asks ``pgsched.vacuum_candidates`` which partitions are
worth it and vacuums those, each with SKIP_LOCKED (a partition another process
is vacuuming is left alone). VACUUM takes no lock that blocks claims or writes.
A role that may not vacuum the partitions gets no candidates, and the thread
only checks now and then.

It also runs ANALYZE on a partition whose row count has moved far from what
the planner believes: plans of claim, heartbeat and complete are cached per
connection, and those built while the table was empty scan it whole once a
burst arrives (0.5 ms claims become 170 ms ones) until the statistics change.
"""

from __future__ import annotations

import logging
import random
import threading
import time

import psycopg
from psycopg import sql

from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting

log = logging.getLogger(__name__)

#: Partitions with fewer dead row versions than this are left to autovacuum.
MIN_DEAD = 10_000
#: ... as are those with fewer dead than this fraction of their live rows.
DEAD_RATIO = 0.2


class Vacuumer:
    """A thread that, every ``interval`` seconds, vacuums or analyzes the partitions of pgsched.jobs that need it."""

    def __init__(
        self,
        dsn: str,
        *,
        interval: float,
        purpose: str,
        min_dead: int | None = None,
        dead_ratio: float | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("the vacuum interval must be positive")
        self._stop = threading.Event()
        self._db = Reconnecting(dsn, purpose=f"{purpose} vacuum", stop=self._stop, prepare=False)
        self._interval = interval
        self._min_dead = MIN_DEAD if min_dead is None else min_dead
        self._dead_ratio = DEAD_RATIO if dead_ratio is None else dead_ratio
        self.vacuums = 0
        self.analyzes = 0
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._loop, name="pgsched-vacuum", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        conn = self._db.conn
        if conn is not None and self._thread.is_alive():
            try:
                conn.cancel_safe(timeout=1.0)  # a VACUUM under way
            except Exception:
                pass
        if self._thread.ident is not None:
            self._thread.join(timeout=5.0)
        self._db.close()

    def _loop(self) -> None:
        # Jittered, so that many workers started together do not all look at once.
        while not self._stop.wait(self._interval * (0.8 + 0.4 * random.random())):
            try:
                self.run_once()
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not self._stop.is_set():
                    log.warning("vacuum check failed (%s); trying again later", exc)
                self._db.discard()
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning("vacuum check failed: %s", exc)

    def run_once(self) -> list[str]:
        """Vacuum and/or analyze every partition that needs it now; returns those it worked on."""
        conn = self._db.get()
        rows = conn.execute(queries.VACUUM_CANDIDATES, (self._min_dead, self._dead_ratio)).fetchall()
        done: list[str] = []
        for schema, table, dead, live, needs_vacuum, needs_analyze in rows:
            if self._stop.is_set():
                break
            target = sql.Identifier(schema, table)
            if needs_vacuum:
                options = "SKIP_LOCKED, ANALYZE" if needs_analyze else "SKIP_LOCKED"
                statement = sql.SQL("VACUUM ({}) {}").format(sql.SQL(options), target)
            else:
                statement = sql.SQL("ANALYZE (SKIP_LOCKED) {}").format(target)
            started = time.monotonic()
            conn.execute(statement)
            took = time.monotonic() - started
            self.vacuums += needs_vacuum
            self.analyzes += needs_analyze
            self.seconds += took
            done.append(f"{schema}.{table}")
            log.debug(
                "%s %s.%s (%d dead, %d live row versions) in %.3fs",
                "vacuumed" if needs_vacuum else "analyzed",
                schema,
                table,
                dead,
                live,
                took,
            )
        return done
