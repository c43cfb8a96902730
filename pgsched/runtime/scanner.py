"""The scanner: owns shards by epoch-fenced leases and keeps time for them.

Per owned shard it expires dead workers' leases, promotes due jobs (waking
workers), and sleeps until exactly the next due job (an index probe), waking
early when an earlier one is enqueued (NOTIFY pgsched_scheduled). It expands
the recurring schedules of its shards into ordinary jobs over a rolling
horizon, and runs the partition and pruning housekeeping. Any number of
scanners may run; they split the shards between them, and one that lost its
lease has every write rejected by the epoch (SQLSTATE PS409).

A running scanner expands on a thread (and connection) of its own, so the
scans that promote due jobs never wait for an expansion pass, however dense
the schedule; ``tick()`` called alone (tests) expands in line.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import FrameType

import psycopg

from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting
from pgsched.runtime.expansion import MAX_FIRES_PER_EXPANSION, Expander, Pass, plan_occurrences
from pgsched.runtime.housekeeping import spaced
from pgsched.runtime.listener import Listener
from pgsched.runtime.vacuumer import Vacuumer

log = logging.getLogger(__name__)

LEASE_LOST = "PS409"
SCHEDULED_CHANNEL = "pgsched_scheduled"
__all__ = ["MAX_FIRES_PER_EXPANSION", "Scanner", "ScannerOptions", "ScannerStats", "plan_occurrences"]


@dataclass(kw_only=True)
class ScannerOptions:
    """How a scanner runs. Durations are seconds."""

    name: str | None = None
    lease: float = 10.0  # shard lease; another scanner takes a dead one's shards after this
    scan_interval: float = 1.0  # each owned shard is scanned at least this often (lease expiry)
    max_sleep: float = 5.0  # upper bound on sleeping when nothing is due
    expansion_interval: float = 5.0  # schedules are checked for expansion this often
    maintain_interval: float = 3600.0
    rollup_interval: float = 15.0  # per-minute queue history (pgsched.queue_history) is rolled up this often
    vacuum_interval: float = 5.0  # vacuum/analyze pgsched.jobs' partitions when needed (0: leave it to autovacuum)
    listen: bool = True
    prepare: bool = True
    install_signal_handlers: bool = True


@dataclass
class _Shard:
    epoch: int
    due: float = 0.0  # monotonic time of the next due job (0: now)
    next_scan: float = 0.0


@dataclass
class ScannerStats:
    scans: int = 0
    promoted: int = 0
    expired: int = 0
    occurrences: int = 0
    computed: int = 0  # cron occurrences computed by expansion passes
    rejected: int = 0
    owned: list[int] = field(default_factory=list)


def default_scanner_name() -> str:
    return f"scanner:{socket.gethostname()}:{os.getpid()}:{random.randrange(16**4):04x}"


class Scanner:
    """Runs until stop() (or SIGTERM/SIGINT when it owns the main thread)."""

    def __init__(self, dsn: str, options: ScannerOptions | None = None) -> None:
        self.dsn = dsn
        self.options = options or ScannerOptions()
        if self.options.lease < 1:
            raise ValueError("the scanner lease must be at least 1 second")
        if self.options.vacuum_interval < 0:
            raise ValueError("the vacuum interval must be positive, or 0 to leave vacuuming to autovacuum")
        self.name = self.options.name or default_scanner_name()
        self.stats = ScannerStats()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._notified = threading.Event()
        self._db = Reconnecting(dsn, purpose=f"scanner {self.name}", stop=self._stop, prepare=self.options.prepare)
        self._shards: dict[int, _Shard] = {}
        self._expander = Expander(self._db, self.name, keep_alive=self._keep_alive)
        self._next_renew = 0.0
        self._next_expand = 0.0
        self._next_maintain = 0.0
        self._next_rollup = 0.0
        self._listener: Listener | None = None
        self._vacuumer: Vacuumer | None = None
        # Shards change on the tick's thread; the expansion thread reads their epochs under this lock.
        self._lock = threading.Lock()
        self._background: _Expansions | None = None

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        log.info("%s: scanner %s stopping", signal.Signals(signum).name, self.name)
        self.stop()

    @property
    def owned(self) -> list[int]:
        return sorted(self._shards)

    def run(self) -> int:
        if self.options.install_signal_handlers and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        if self.options.listen:
            self._listener = Listener(
                self.dsn, [""], self._on_notify, stop=threading.Event(), channel=SCHEDULED_CHANNEL
            )
            self._listener.start()
        if self.options.vacuum_interval > 0:
            self._vacuumer = Vacuumer(self.dsn, interval=self.options.vacuum_interval, purpose=f"scanner {self.name}")
            self._vacuumer.start()
        self._background = _Expansions(self)
        self._background.start()
        log.info("scanner %s started (lease %.0fs)", self.name, self.options.lease)
        try:
            while not self._stop.is_set():
                try:
                    delay = self.tick()
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    log.warning("scanner %s: database unavailable (%s); retrying", self.name, exc)
                    delay = min(1.0, self.options.scan_interval)
                    self._next_renew = 0.0
                except psycopg.Error:
                    # A statement failed (not the connection): report it, keep the scanner alive.
                    log.exception("scanner %s: tick failed; retrying", self.name)
                    delay = min(1.0, self.options.scan_interval)
                if delay > 0:
                    self._wake.wait(delay)
                self._wake.clear()
        finally:
            self._shutdown()
        return 0

    def _on_notify(self) -> None:
        self._notified.set()
        self._wake.set()

    # -- one tick --------------------------------------------------------

    def tick(self) -> float:
        """Do whatever is due now; return how long to sleep before the next tick."""
        now = time.monotonic()
        if now >= self._next_renew:
            self._renew()
            now = time.monotonic()
        if self._background is not None:
            self._take_passes()
        if self._notified.is_set():
            self._notified.clear()
            self._refresh_due()
        expanded = self._next_expand == 0.0
        if expanded:
            # Shards just gained: decide the occurrences missed while nobody held them. In line,
            # before promoting; on the expansion thread, beside it: promote_due leaves a missed
            # occurrence waiting until its schedule is expanded up to now, so the misfire policy
            # sees all of them at once either way.
            self._expand(now)
        for shard_no, shard in list(self._shards.items()):
            if shard.due <= now or shard.next_scan <= now:
                self._scan(shard_no, shard)
        now = time.monotonic()
        if now >= self._next_expand and not expanded:  # one time-boxed pass per tick: renewals come first
            self._expand(now)
        if now >= self._next_maintain:
            self._next_maintain = now + self.options.maintain_interval
            self._db.call(lambda c: c.execute(queries.MAINTAIN))
        if now >= self._next_rollup:
            self._next_rollup = now + self.options.rollup_interval
            self._db.call(lambda c: c.execute(queries.ROLLUP_QUEUE_HISTORY))
        now = time.monotonic()
        wake_at = min(
            [self._next_renew, self._next_expand, now + self.options.max_sleep]
            + [min(s.due, s.next_scan) for s in self._shards.values()]
        )
        return max(0.0, wake_at - now)

    def _expand(self, now: float) -> None:
        self._next_expand = now + self.options.expansion_interval
        if self._background is not None:
            self._background.request()
        else:
            self.expand_schedules()

    def _take_passes(self) -> None:
        """Apply what the expansion thread's finished passes found (shards lost, work left over)."""
        assert self._background is not None
        while True:
            try:
                result = self._background.done.get_nowait()
            except queue.Empty:
                return
            self._apply(result)

    def _renew(self) -> None:
        lease = timedelta(seconds=self.options.lease)
        rows = self._db.call(
            lambda c: c.execute(
                queries.ACQUIRE_SHARDS,
                (self.name, lease, socket.gethostname(), os.getpid()),
            ).fetchall()
        )
        held = {int(shard): int(epoch) for shard, epoch in rows}
        gained = set(held) - set(self._shards)
        lost = set(self._shards) - set(held)
        with self._lock:
            for shard_no in lost:
                del self._shards[shard_no]
            for shard_no, epoch in held.items():
                current = self._shards.get(shard_no)
                if current is None or current.epoch != epoch:
                    self._shards[shard_no] = _Shard(epoch=epoch)
        if gained or lost:
            log.info(
                "scanner %s owns shards %s (gained %s, gave up %s)",
                self.name,
                self.owned,
                sorted(gained),
                sorted(lost),
            )
            if gained:
                self._next_expand = 0.0
        self.stats.owned = self.owned
        self._next_renew = time.monotonic() + self.options.lease / 3

    def _keep_alive(self) -> dict[int, int]:
        """Between an expansion pass's writes in line: renew the leases when due; the epochs held now."""
        if time.monotonic() >= self._next_renew:
            self._renew()
        return self.epochs()

    def epochs(self) -> dict[int, int]:
        """The shards held now, with their epochs (read from any thread)."""
        with self._lock:
            return {shard_no: shard.epoch for shard_no, shard in self._shards.items()}

    def _refresh_due(self) -> None:
        if not self._shards:
            return
        shards = self.owned
        rows = self._db.call(lambda c: c.execute(queries.NEXT_DUE, (shards,)).fetchall())
        now = time.monotonic()
        for shard_no, due, db_now in rows:
            if shard_no in self._shards:
                self._shards[shard_no].due = _due_monotonic(due, db_now, now)

    def _scan(self, shard_no: int, shard: _Shard) -> None:
        began = time.monotonic()
        try:
            row = self._db.call(
                lambda c: c.execute(
                    queries.SCAN_SHARD,
                    (self.name, shard_no, shard.epoch),
                ).fetchone()
            )
        except psycopg.Error as exc:
            if exc.sqlstate == LEASE_LOST:
                self._lost(shard_no, exc)
                return
            raise
        assert row is not None
        expired, promoted, next_due, db_now = row
        now = time.monotonic()
        self.stats.scans += 1
        self.stats.expired += expired
        self.stats.promoted += promoted
        if expired:
            log.info("shard %s: expired %d leases of dead or stalled workers", shard_no, expired)
        shard.due = _due_monotonic(next_due, db_now, now)
        # Due jobs are promoted when due (shard.due) whatever this says; the scan that only looks for expired
        # leases waits at least EXPIRY_SPACING times its own length (while the xmin horizon is held it reads
        # every dead index entry of the jobs run since).
        shard.next_scan = now + spaced(self.options.scan_interval, now - began)

    def _lost(self, shard_no: int, exc: psycopg.Error) -> None:
        self.stats.rejected += 1
        with self._lock:
            self._shards.pop(shard_no, None)
        self._next_renew = 0.0
        log.warning(
            "scanner %s: write for shard %s rejected, the lease moved on (SQLSTATE %s): %s",
            self.name,
            shard_no,
            exc.sqlstate,
            exc.diag.message_primary,
        )

    # -- schedules -------------------------------------------------------

    def expand_schedules(self) -> int:
        """Expand the schedules of owned shards that need it; returns the number of jobs created.

        A pass is time-boxed to a quarter of the lease, so the scanner renews its leases in
        time; schedules left over are expanded at the next tick.
        """
        if not self._shards:
            return 0
        result = self._expander.run(self.epochs(), budget=self.options.lease / 4)
        self._apply(result)
        return result.created

    def _apply(self, result: Pass) -> None:
        for shard_no, exc in result.lost.items():
            self._lost(shard_no, exc)
        if result.unfinished:
            self._next_expand = time.monotonic()
        self.stats.occurrences += result.created
        self.stats.computed += result.computed

    # -- shutdown --------------------------------------------------------

    def _shutdown(self) -> None:
        if self._background is not None:
            self._background.close()
            self._background = None
        if self._listener is not None:
            self._listener.close()
        if self._vacuumer is not None:
            self._vacuumer.close()
        try:
            conn = self._db.get()
            conn.execute(queries.RELEASE_SHARDS, (self.name,))
            log.info("scanner %s released shards %s", self.name, self.owned)
        except psycopg.Error as exc:
            log.warning("scanner %s could not release its shards (%s); they expire with the lease", self.name, exc)
        with self._lock:
            self._shards.clear()
        self._db.close()


class _Expansions:
    """The scanner's expansion thread: one time-boxed pass per request, on a connection of its own.

    Leases stay the scanner's (its tick renews them, unblocked); a pass reads the epochs held at each
    write and hands its result back through ``done``, for the tick to apply.
    """

    def __init__(self, scanner: Scanner) -> None:
        self._scanner = scanner
        self._stop = threading.Event()
        self._requested = threading.Event()
        self.done: queue.SimpleQueue[Pass] = queue.SimpleQueue()
        options = scanner.options
        self._db = Reconnecting(
            scanner.dsn, purpose=f"scanner {scanner.name} schedules", stop=self._stop, prepare=options.prepare
        )
        self._expander = Expander(self._db, scanner.name, keep_alive=scanner.epochs)
        self._thread = threading.Thread(target=self._run, name="pgsched-scanner-expansion", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        self._requested.set()

    def close(self) -> None:
        self._stop.set()
        self._requested.set()
        self._thread.join(timeout=30)
        self._db.close()

    def _run(self) -> None:
        budget = self._scanner.options.lease / 4
        while not self._stop.is_set():
            self._requested.wait()
            self._requested.clear()
            if self._stop.is_set():
                break
            epochs = self._scanner.epochs()
            if not epochs:
                continue
            try:
                result = self._expander.run(epochs, budget=budget)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                log.warning("scanner %s: expansion: database unavailable (%s); next pass", self._scanner.name, exc)
                continue
            except psycopg.Error:
                log.exception("scanner %s: expansion pass failed; next pass", self._scanner.name)
                continue
            self.done.put(result)
            self._scanner._on_notify()  # the tick applies it, and looks again at when jobs are due


def _due_monotonic(due: datetime | None, db_now: datetime, mono_now: float) -> float:
    """A database timestamp as a time.monotonic() value, measured against the database's clock."""
    if due is None:
        return float("inf")
    return mono_now + max(0.0, (due - db_now).total_seconds())
