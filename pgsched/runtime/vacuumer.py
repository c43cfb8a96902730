"""Keeps the hot tables lean and their plans right: the ring of due jobs turned, VACUUM / ANALYZE when needed.

Every second it turns the ring of pgsched.ready (``pgsched.rotate_ready``): a
new slot opens, and slots whose due jobs have all been claimed are emptied by
TRUNCATE, which needs no vacuum and is not held back by the xmin horizon.
While a transaction has held the horizon for PINNED_AFTER seconds or more, it
turns the ring four times a second: every claim steps over the entries of the
jobs claimed since their slot opened, and with the horizon held none of them
can be marked dead in the index, so a claim at thousands of jobs a second would
step over tens of thousands. A quarter-second slot keeps that to a few
thousand, at the price of a TRUNCATE (and every session's plans of the ring
made again) four times a second, which is why it is not done always.

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

While something pins the xmin horizon (a session idle in a transaction that
wrote, a forgotten prepared transaction, a slot), VACUUM can remove nothing
that died after it began: a partition vacuumed since the same holder took
the horizon is not vacuumed again until it moves (a vacuum then would read
the whole partition and remove nothing), and the log says once who holds
it. Autovacuum and other workers' threads decide for themselves.

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
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting

log = logging.getLogger(__name__)

#: Partitions with fewer dead row versions than this are left to autovacuum.
MIN_DEAD = 10_000
#: ... as are those with fewer dead than this fraction of their live rows.
DEAD_RATIO = 0.2
#: Seconds between turns of the ring of due jobs (pgsched.rotate_ready), and how long each slot stays open.
ROTATE_INTERVAL = 1.0
#: ... while the xmin horizon is held (pgsched.xmin_horizon(): a transaction open this many seconds or more).
PINNED_ROTATE_INTERVAL = 0.25
PINNED_AFTER = 2.0


class Vacuumer:
    """A thread that turns the ring of due jobs every second and, every ``interval`` seconds, vacuums or analyzes
    the partitions of pgsched.jobs that need it."""

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
        self.skipped = 0  # vacuums left out while the horizon stayed where it was
        # Per partition, the horizon (oldest holder's xid) seen right before its last vacuum here: while the
        # horizon is still that one, everything that vacuum could not remove is still unremovable.
        self._vacuumed_under: dict[str, str] = {}
        self._pinned_by: str | None = None  # the horizon last reported as pinned (said once)
        self.rotate_interval = ROTATE_INTERVAL  # PINNED_ROTATE_INTERVAL while the horizon is held
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
        next_check = time.monotonic() + self._interval * (0.8 + 0.4 * random.random())
        next_horizon = 0.0
        while not self._stop.wait(min(self.rotate_interval, self._interval) * (0.8 + 0.4 * random.random())):
            try:
                if time.monotonic() >= next_horizon:
                    next_horizon = time.monotonic() + ROTATE_INTERVAL
                    self.watch_horizon()
                self.rotate()
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + self._interval * (0.8 + 0.4 * random.random())
                    self.run_once()
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not self._stop.is_set():
                    log.warning("vacuum check failed (%s); trying again later", exc)
                self._db.discard()
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning("vacuum check failed: %s", exc)

    def watch_horizon(self) -> None:
        """Turn the ring faster while a transaction has held the xmin horizon PINNED_AFTER seconds or more (one
        this role may see: without pg_read_all_stats, its own sessions), at the usual pace again once it has gone."""
        try:
            holder = self._db.get().execute(queries.XMIN_HOLDER).fetchone()
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise
        except psycopg.Error as exc:
            log.debug("could not read the xmin horizon (%s); turning the ring at the usual pace", exc)
            holder = None
        age_s = holder[4] if holder else None
        interval = PINNED_ROTATE_INTERVAL if age_s is not None and age_s >= PINNED_AFTER else ROTATE_INTERVAL
        if interval != self.rotate_interval:
            log.debug("turning the ring of due jobs every %gs (xmin horizon held for %ss)", interval, age_s)
        self.rotate_interval = interval

    def rotate(self) -> list[tuple[int, str, int | None]]:
        """Turn the ring of due jobs (pgsched.rotate_ready, slots open rotate_interval): returns what it did."""
        period = timedelta(seconds=self.rotate_interval)
        rows: list[tuple[int, str, int | None]] = self._db.get().execute(queries.ROTATE_READY, (period,)).fetchall()
        for slot, action, moved in rows:
            if action == "kept":
                log.debug("ready slot %d kept: %s due jobs still in it", slot, moved)
        return rows

    def run_once(self) -> list[str]:
        """Vacuum and/or analyze every partition that needs it now; returns those it worked on."""
        conn = self._db.get()
        rows = conn.execute(queries.VACUUM_CANDIDATES, (self._min_dead, self._dead_ratio)).fetchall()
        holder = conn.execute(queries.XMIN_HOLDER).fetchone() if any(r[4] for r in rows) else None
        horizon: str | None = holder[2] if holder else None
        done: list[str] = []
        pinned: list[str] = []
        waiting = 0  # dead row versions in the partitions left alone
        for schema, table, dead, live, needs_vacuum, needs_analyze in rows:
            if self._stop.is_set():
                break
            name = f"{schema}.{table}"
            if needs_vacuum and horizon is not None and self._vacuumed_under.get(name) == horizon:
                needs_vacuum = False
                pinned.append(name)
                waiting += dead
                self.skipped += 1
                if not needs_analyze:
                    continue
            target = sql.Identifier(schema, table)
            if needs_vacuum:
                options = "SKIP_LOCKED, ANALYZE" if needs_analyze else "SKIP_LOCKED"
                statement = sql.SQL("VACUUM ({}) {}").format(sql.SQL(options), target)
            else:
                statement = sql.SQL("ANALYZE (SKIP_LOCKED) {}").format(target)
            started = time.monotonic()
            conn.execute(statement)
            took = time.monotonic() - started
            if needs_vacuum and horizon is not None:
                self._vacuumed_under[name] = horizon
            self.vacuums += needs_vacuum
            self.analyzes += needs_analyze
            self.seconds += took
            done.append(name)
            log.debug(
                "%s %s (%d dead, %d live row versions) in %.3fs",
                "vacuumed" if needs_vacuum else "analyzed",
                name,
                dead,
                live,
                took,
            )
        self._say_pinned(pinned, waiting, holder)
        return done

    def _say_pinned(self, pinned: list[str], waiting: int, holder: tuple[Any, ...] | None) -> None:
        if not pinned or holder is None:
            if self._pinned_by is not None and not pinned:
                log.info("the xmin horizon moved on: vacuuming pgsched.jobs' partitions again when they need it")
                self._pinned_by = None
            return
        kind, pid, horizon, xid_age, age_s, state, application = holder
        if kind == "session":
            who = f"pid {pid} ({application or 'no application_name'}, {state})"
        else:
            who = f"{kind}" + (f" (pid {pid})" if pid else "")
        held = f" for {age_s:.0f}s" if age_s is not None else ""
        level = logging.WARNING if self._pinned_by != horizon else logging.DEBUG
        self._pinned_by = horizon
        log.log(
            level,
            "not vacuuming %d partitions of pgsched.jobs again (%d dead row versions wait): the xmin horizon has"
            " not moved since their last vacuum, so VACUUM can remove nothing more; %s has held it back%s,"
            " %d transactions",
            len(pinned),
            waiting,
            who,
            held,
            xid_age,
        )
