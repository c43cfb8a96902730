"""Schedule expansion: deciding each occurrence of a recurring schedule, in bounded passes.

A pass plans, per schedule of the shards its holder leases, the occurrences
from where the last expansion stopped to a rolling horizon, and files them with
pgsched.add_occurrences (fenced by the shard's epoch). The work of one pass is
bounded twice: a schedule plans at most MAX_FIRES_PER_EXPANSION fires ahead
(cron occurrences are generated lazily and the generation stops there), and a
pass stops at its time budget, leaving the remaining schedules for the next
one, so its holder renews its leases in time. Occurrences missed while nobody
expanded are decided over the whole missed window at once, whatever its
length: 'latest' runs the last one, 'all' the last misfire_cap ones.

Scanners run passes over the shards they own. A worker with housekeeping runs
a ScheduleKeeper thread, which leases only the shards that no scanner holds
(pgsched.acquire_idle_shards) and hands them back as soon as a scanner is
live, so `pgsched worker` alone fires schedules.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgsched.core import cron
from pgsched.db import queries
from pgsched.db.dbconn import Reconnecting

log = logging.getLogger(__name__)

LEASE_LOST = "PS409"
MAX_FIRES_PER_EXPANSION = 1000
# Fires filed per add_occurrences() call: between calls the holder renews its leases and the pass
# checks its budget, so one schedule's thousand inserts never outlast a lease on a loaded server.
FIRES_PER_WRITE = 100
# Errors that say the schedule itself is wrong (data, constraint, raised by a function), recorded on
# it; others (a deadlock, a server shutting down) are only logged and the schedule is tried again.
_SCHEDULE_FAULTS = ("22", "23", "42", "P0", "PS")
_FIRING = frozenset({cron.Decision.FIRE.value, cron.Decision.FIRE_OVERLAP_SECOND.value})


@dataclass
class Plan:
    """One schedule's decisions for add_occurrences(), how far they reach, and the work they took."""

    decisions: list[dict[str, Any]]
    until: datetime
    computed: int  # occurrences the cron generator produced for this plan


def plan_occurrences(
    schedule: dict[str, Any], start: datetime, end: datetime, now: datetime
) -> tuple[list[dict[str, Any]], datetime]:
    """Decide every occurrence of a schedule in [start, end): which fire, which are skipped and why.

    Returns the decisions (as add_occurrences() takes them) and the instant the
    expansion really reached (earlier than ``end`` when more than
    MAX_FIRES_PER_EXPANSION occurrences fall after the missed window).
    """
    found = plan(schedule, start, end, now)
    return found.decisions, found.until


def plan(schedule: dict[str, Any], start: datetime, end: datetime, now: datetime) -> Plan:
    """`plan_occurrences`, with the count of occurrences computed (bounded, whatever the window)."""
    expr, tz = schedule["cron"], schedule["timezone"]
    gap = cron.GapPolicy(schedule["gap_policy"])
    overlap = cron.OverlapPolicy(schedule["overlap_policy"])
    policy = cron.MisfirePolicy(schedule["misfire_policy"])
    cap = int(schedule["misfire_cap"])
    grace: timedelta = schedule["misfire_grace"]
    decisions: list[dict[str, Any]] = []
    computed = 0

    # Missed: due before now - grace and never expanded. The policy applies to the whole window.
    missed_end = min(now - grace, end)
    ahead_from = start
    if start < missed_end:
        ahead_from = missed_end
        rows: list[tuple[cron.Occurrence, str]] = []
        fires = 0
        for occ, decision in cron.iter_explain(expr, tz, start, missed_end, gap=gap, overlap=overlap):
            computed += 1
            fires += decision in _FIRING
            if fires > MAX_FIRES_PER_EXPANSION:
                break
            rows.append((occ, decision))
        if fires <= MAX_FIRES_PER_EXPANSION:
            missed = [occ for occ, decision in rows if decision in _FIRING]
            chosen = {occ.fire_at for occ in cron.select_misfires(missed, policy, cap)}
            for occ, decision in rows:
                entry = _entry(occ, decision, schedule)
                if entry is not None and decision in _FIRING:
                    _misfire(entry, occ, occ.fire_at in chosen, schedule)
                if entry is not None:
                    decisions.append(entry)
        else:
            # A long outage: only the runs the policy keeps are computed (searching backwards), and
            # the skipped ones are recorded as one row at the first of them.
            keep = {cron.MisfirePolicy.SKIP: 0, cron.MisfirePolicy.LATEST: 1, cron.MisfirePolicy.ALL: cap}[policy]
            late, searched = cron.last_fires(expr, tz, start, missed_end, keep, gap=gap, overlap=overlap)
            computed += searched
            first = next(occ for occ, decision in rows if decision in _FIRING)
            if not late or first.fire_at < late[0].fire_at:
                entry = _entry(first, cron.Decision.FIRE.value, schedule)
                assert entry is not None
                entry["decision"] = "skipped_misfire"
                before = late[0].fire_at.isoformat() if late else missed_end.isoformat()
                entry["reason"] = (
                    f"missed while nothing expanded this schedule: every occurrence from {first.fire_at.isoformat()}"
                    f" to before {before} skipped (over {MAX_FIRES_PER_EXPANSION}); "
                    f"misfire policy {policy.value}"
                )
                decisions.append(entry)
            for occ in late:
                entry = _entry(occ, cron.Decision.FIRE.value, schedule)
                assert entry is not None
                _misfire(entry, occ, True, schedule)
                decisions.append(entry)

    until = end
    if ahead_from < end:
        fires = 0
        for occ, decision in cron.iter_explain(expr, tz, ahead_from, end, gap=gap, overlap=overlap):
            computed += 1
            if decision in _FIRING:
                fires += 1
                if fires > MAX_FIRES_PER_EXPANSION:
                    until = occ.fire_at
                    break
            entry = _entry(occ, decision, schedule)
            if entry is not None:
                decisions.append(entry)
        cut = until.isoformat()
        decisions = [e for e in decisions if e["fire_at"] < cut] if until < end else decisions
    # Fires first at a shared instant, so the decision recorded there is the fire.
    decisions.sort(key=lambda e: (e["fire_at"], e["decision"] not in ("fire", "misfire_fired")))
    return Plan(decisions=decisions, until=until, computed=computed)


def _entry(occ: cron.Occurrence, decision: str, schedule: dict[str, Any]) -> dict[str, Any] | None:
    tz = schedule["timezone"]
    entry: dict[str, Any] = {"fire_at": occ.fire_at.isoformat(), "nominal": occ.nominal, "dst": occ.dst}
    if decision in _FIRING:
        entry["decision"] = "fire"
        if occ.dst:
            entry["reason"] = _dst_reason(occ, schedule)
    elif decision == cron.Decision.SKIPPED_GAP.value:
        entry["decision"] = "skipped_gap"
        entry["reason"] = f"{occ.nominal} does not exist in {tz} (DST gap); gap policy skip"
    elif decision == cron.Decision.SKIPPED_OVERLAP.value:
        entry["decision"] = "skipped_dst_overlap"
        entry["reason"] = f"{occ.nominal} happens twice in {tz} (DST overlap); overlap policy once"
    else:
        return None  # merged into another occurrence at the same instant
    return entry


def _misfire(entry: dict[str, Any], occ: cron.Occurrence, runs: bool, schedule: dict[str, Any]) -> None:
    policy = schedule["misfire_policy"]
    if runs:
        entry["decision"] = "misfire_fired"
        entry["reason"] = f"missed (due {occ.fire_at.isoformat()}); misfire policy {policy}"
    else:
        entry["decision"] = "skipped_misfire"
        entry["reason"] = f"missed while nothing expanded this schedule; misfire policy {policy}"


def _dst_reason(occ: cron.Occurrence, schedule: dict[str, Any]) -> str:
    tz = schedule["timezone"]
    if occ.dst == cron.Dst.GAP_SHIFTED:
        return f"{occ.nominal} does not exist in {tz} (DST gap); gap policy run: fires at {occ.local.isoformat()}"
    if occ.dst == cron.Dst.OVERLAP_SECOND:
        return f"{occ.nominal} happens twice in {tz}; overlap policy twice: second pass"
    return f"{occ.nominal} happens twice in {tz}; first pass"


# -- passes --------------------------------------------------------------------------------------


@dataclass
class Pass:
    """What one expansion pass did."""

    created: int = 0
    expanded: int = 0  # schedules filed
    errors: int = 0  # schedules that recorded an error
    computed: int = 0  # occurrences computed, over all schedules
    unfinished: bool = False  # the time budget ran out: the rest waits for the next pass
    lost: dict[int, psycopg.Error] = field(default_factory=dict)  # shards whose lease moved on


class Expander:
    """Expands the schedules of the shards a holder (scanner or worker) leases, within a time budget.

    ``keep_alive``, called between writes, renews the holder's leases when they are due and returns
    the epochs held afterwards, so a long pass never outlives them.
    """

    def __init__(self, db: Reconnecting, holder: str, keep_alive: Callable[[], dict[int, int]] | None = None) -> None:
        self._db = db
        self.holder = holder
        self._keep_alive = keep_alive

    def run(self, epochs: dict[int, int], budget: float) -> Pass:
        result = Pass()
        if not epochs:
            return result
        self._epochs = dict(epochs)
        self._deadline = time.monotonic() + budget
        rows = self._db.call(lambda c: _due_schedules(c, sorted(epochs)))
        for index, row in enumerate(rows):
            shard = int(row["shard"])
            if index:  # the first one always goes (every pass gets somewhere), under the epochs it was given
                if time.monotonic() >= self._deadline:
                    result.unfinished = True
                    break
                self._renew()
            if shard in result.lost or shard not in self._epochs:
                continue
            try:
                if not self._expand_one(row, result):
                    result.unfinished = True
                    break
            except psycopg.Error as exc:
                if exc.sqlstate == LEASE_LOST:
                    result.lost[shard] = exc
                elif isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
                    raise
                elif (exc.sqlstate or "")[:2] in _SCHEDULE_FAULTS:
                    self._record(row, f"{exc.diag.message_primary} (SQLSTATE {exc.sqlstate})", result)
                else:
                    log.warning("schedule %s: expansion failed (%s); trying again next pass", row["name"], exc)
        return result

    def _renew(self) -> None:
        if self._keep_alive is not None:
            self._epochs = self._keep_alive()

    def _expand_one(self, row: dict[str, Any], result: Pass) -> bool:
        """File one schedule's plan in writes of FIRES_PER_WRITE fires; False if the budget ran out first."""
        name, shard = row["name"], int(row["shard"])
        db_now: datetime = row["db_now"]
        if not row["enabled"]:
            chunks: list[tuple[list[dict[str, Any]], datetime, datetime]] = [([], db_now, db_now)]
        else:
            changed = row["expanded_version"] != row["version"]
            start = db_now if changed or row["expanded_until"] is None else row["expanded_until"]
            try:
                found = plan(row, start, db_now + row["horizon"], db_now)
            except cron.CronError as exc:
                self._record(row, str(exc), result)
                return True
            result.computed += found.computed
            chunks = _chunks(found.decisions, start, found.until)
        for index, (decisions, start, until) in enumerate(chunks):
            if index:
                if time.monotonic() >= self._deadline:
                    return False  # expanded_until says where the next pass resumes
                self._renew()
            epoch = self._epochs.get(shard)
            if epoch is None:
                return True  # the shard moved on meanwhile
            params = (self.holder, shard, epoch, name, row["version"], json.dumps(decisions), start, until)
            value = self._db.call(
                lambda c, params=params: c.execute(  # type: ignore[misc]
                    queries.ADD_OCCURRENCES, params
                ).fetchone()
            )
            created = int(value[0]) if value else 0
            result.created += created
            if created:
                log.debug("schedule %s: %d occurrences up to %s", name, created, until)
        result.expanded += 1
        return True

    def _record(self, row: dict[str, Any], message: str, result: Pass) -> None:
        """The schedule cannot be expanded: say why on it (last_error), and go on with the others."""
        log.error("schedule %s cannot be expanded: %s", row["name"], message)
        epoch = self._epochs.get(int(row["shard"]))
        if epoch is None:
            return
        result.errors += 1
        self._db.call(
            lambda c: c.execute(
                queries.SCHEDULE_ERROR,
                (self.holder, row["shard"], epoch, row["name"], row["version"], message),
            )
        )


def _chunks(
    decisions: list[dict[str, Any]], start: datetime, until: datetime
) -> list[tuple[list[dict[str, Any]], datetime, datetime]]:
    """Consecutive windows [from, until) of at most FIRES_PER_WRITE fires each, cut between instants."""
    chunks: list[tuple[list[dict[str, Any]], datetime, datetime]] = []
    current: list[dict[str, Any]] = []
    fires = 0
    lo = start
    for entry in decisions:
        if fires >= FIRES_PER_WRITE and entry["fire_at"] != current[-1]["fire_at"]:
            cut = datetime.fromisoformat(entry["fire_at"])
            chunks.append((current, lo, cut))
            current, fires, lo = [], 0, cut
        current.append(entry)
        fires += entry["decision"] in ("fire", "misfire_fired")
    chunks.append((current, lo, until))
    return chunks


def _due_schedules(conn: psycopg.Connection[Any], shards: list[int]) -> list[dict[str, Any]]:
    """Schedules of these shards that need expanding, the most behind first (a busy one cannot keep
    the others waiting); one whose version failed waits for an edit."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(queries.DUE_SCHEDULES, (shards,)).fetchall()


# -- in workers ----------------------------------------------------------------------------------


class ScheduleKeeper:
    """A worker's thread that expands schedules on the shards no scanner holds.

    It leases idle shards under its own name (``keeper:<worker>``) with the same epoch fencing as
    scanners, renews them every lease/3, expands their schedules every ``interval`` seconds (at
    once after gaining a shard, so missed occurrences are decided before they are promoted), and
    gives the shards back when it stops or as soon as a scanner is live.
    """

    def __init__(
        self, dsn: str, worker: str, *, lease: float = 10.0, interval: float = 5.0, prepare: bool = True
    ) -> None:
        if lease < 1:
            raise ValueError("the schedule lease must be at least 1 second")
        self.holder = f"keeper:{worker}"[:200]
        self.lease = lease
        self.interval = interval
        self._stop = threading.Event()
        self._db = Reconnecting(dsn, purpose=f"worker {worker} schedules", stop=self._stop, prepare=prepare)
        self._expander = Expander(self._db, self.holder, keep_alive=self._keep_alive)
        self._next_renew = 0.0
        self._thread: threading.Thread | None = None
        self.epochs: dict[int, int] = {}
        self.passes = 0
        self.created = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pgsched-schedules", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.epochs:
            try:
                self._db.get().execute(queries.RELEASE_SHARDS, (self.holder,))
            except psycopg.Error as exc:
                log.warning("%s could not give back its shards (%s); they expire with the lease", self.holder, exc)
        self._db.close()

    def _run(self) -> None:
        # A scanner started beside this worker (`pgsched run`) registers first and keeps the shards.
        self._stop.wait(1.0)
        next_expand = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() >= self._next_renew and self._renew():
                    next_expand = 0.0
                if self.epochs and time.monotonic() >= next_expand:
                    result = self._expander.run(self.epochs, budget=self.lease / 4)
                    self.passes += 1
                    self.created += result.created
                    for shard in result.lost:
                        self.epochs.pop(shard, None)
                    next_expand = time.monotonic() + (0.0 if result.unfinished else self.interval)
                    if result.lost:
                        self._next_renew = 0.0
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                log.warning("%s: database unavailable (%s); retrying", self.holder, exc)
                self._next_renew = 0.0
                self._stop.wait(1.0)
                continue
            except psycopg.Error:
                log.exception("%s: schedule pass failed; retrying", self.holder)
                self._stop.wait(1.0)
                continue
            wait = min(self._next_renew, next_expand if self.epochs else self._next_renew) - time.monotonic()
            self._stop.wait(max(0.0, wait))

    def _keep_alive(self) -> dict[int, int]:
        if time.monotonic() >= self._next_renew:
            self._renew()
        return self.epochs

    def _renew(self) -> bool:
        """Renew and take idle shards; True when one was gained (or came back with a new epoch)."""
        self._next_renew = time.monotonic() + self.lease / 3
        rows = self._db.call(
            lambda c: c.execute(
                queries.ACQUIRE_IDLE_SHARDS,
                (self.holder, timedelta(seconds=self.lease)),
            ).fetchall()
        )
        held = {int(shard): int(epoch) for shard, epoch in rows}
        gained = {s for s, e in held.items() if self.epochs.get(s) != e}
        if set(held) != set(self.epochs):
            log.info("%s expands the schedules of shards %s (no scanner holds them)", self.holder, sorted(held))
        self.epochs = held
        return bool(gained)


__all__ = [
    "MAX_FIRES_PER_EXPANSION",
    "Expander",
    "Pass",
    "Plan",
    "ScheduleKeeper",
    "plan",
    "plan_occurrences",
]
