"""Recurring schedules: cron expressions in IANA zones expanded to UTC fire instants, with DST and misfire policies."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from functools import lru_cache
from importlib import resources
from zoneinfo import ZoneInfo

import tzdata
from cronsim import CronSim, CronSimError

from pgsched.core.policies import GapPolicy, MisfirePolicy, OverlapPolicy

__all__ = [
    "LOOKAHEAD",
    "MACROS",
    "CronError",
    "Decision",
    "Dst",
    "GapPolicy",
    "MisfirePolicy",
    "Occurrence",
    "OverlapPolicy",
    "expand",
    "explain",
    "iter_explain",
    "last_fires",
    "next_fire",
    "select_misfires",
    "validate",
    "zone",
    "zone_source",
]

# How an expression becomes instants. cronsim matches the expression against *naive* wall-clock
# times (calendar logic only); each matching wall time is then mapped to UTC through the zone, so
# the answer for an instant never depends on where a search started. The mapping follows
# cronsim's Debian-cron semantics, made explicit and recorded:
#
# - A *fixed-time* schedule, whose minute and hour fields do not start with '*' ('30 2 * * *',
#   '0 2,3 * * *', '0 30 2 * * *'), names wall-clock times. One that does not exist (spring
#   forward) fires at the end of the gap, or not at all (GapPolicy); one that happens twice
#   (fall back) fires at its first pass, or at both (OverlapPolicy).
# - Any other schedule ('0 * * * *', '*/15 * * * *', '*/15 2 * * *') follows elapsed time: it
#   fires at every instant whose local time matches, so a missing hour is simply absent and a
#   repeated hour fires twice. DST policies do not apply to it.
#
# cronsim itself treats every 6-field (seconds) expression as elapsed-time, so '0 30 2 * * *'
# would silently never fire on a spring-forward day; here the seconds form follows the same rule
# as the 5-field form.


class Dst(StrEnum):
    """Values of `Occurrence.dst`: how a DST transition moved or repeated an occurrence."""

    GAP_SHIFTED = "gap_shifted"
    OVERLAP_FIRST = "overlap_first"
    OVERLAP_SECOND = "overlap_second"


class Decision(StrEnum):
    """What the policies decided for one occurrence, as reported by `explain`."""

    FIRE = "fire"
    FIRE_OVERLAP_SECOND = "fire_overlap_second"
    SKIPPED_GAP = "skipped_gap"
    SKIPPED_OVERLAP = "skipped_overlap"  # second pass of a repeated time, under OverlapPolicy.ONCE
    SKIPPED_DUPLICATE = "skipped_duplicate"  # merged into another occurrence at the same instant


_FIRING = frozenset({Decision.FIRE, Decision.FIRE_OVERLAP_SECOND})


class CronError(ValueError):
    """A cron expression or time zone is invalid; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One firing of a schedule.

    ``fire_at`` is when the job is due (aware, UTC). ``local`` is the same instant in the
    schedule's zone (its ``fold`` tells the passes of a repeated hour apart). ``nominal`` is the
    wall-clock time the expression named, ``YYYY-MM-DDTHH:MM`` (``:SS`` for the seconds form);
    for a gap-shifted occurrence it is a time that did not exist. ``dst`` is None or a `Dst` value.
    Compare instants through ``fire_at``: by PEP 495 a ``local`` in a repeated hour never ``==``
    a datetime in another zone.
    """

    fire_at: datetime
    local: datetime
    nominal: str
    dst: str | None


# cronsim gives up after 50 years without a match; "none found" is trusted this far ahead.
_CRONSIM_HORIZON = timedelta(days=49 * 365)
# How far next_fire() and validate() look ahead: as far as cronsim looks. Every expression that fires
# at all fires within 40 years (a fifth weekday in February needs a leap year starting on that weekday:
# '0 0 * 2 1#5' next fires 2044-02-29, and the longest wait of the 400-year calendar is 40 years), so
# what validate() refuses is what never fires, and what SQL accepts and fires, it accepts too.
LOOKAHEAD = _CRONSIM_HORIZON
_HORIZON = LOOKAHEAD
# Offsets are sampled this often to bound a window's wall-clock range. Exact while no zone
# changes its offset twice within a day: the closest pair in tzdata 2026 is 7 days apart.
_OFFSET_SAMPLE = timedelta(days=1)
# expand() works in pages that start at this size and double, so that next_fire() and
# `limit` stop early; the chunking invariant is what makes pages add up to the whole.
_FIRST_PAGE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)

# Vixie cron's macros (all but @reboot, which names no instant), written as the fields they stand for.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_ZONE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*")
_HOST_ZONES = ("localtime", "posixrules", "posix/", "right/")  # host-specific or leap-second variants
# (name, lowest, highest) of each field of the 6-field form; the 5-field form drops the first.
_FIELDS = (
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)


@dataclass(frozen=True, slots=True)
class _Schedule:
    expr: str
    zone: ZoneInfo
    fixed: bool  # fixed-time (DST policies apply) rather than elapsed-time
    has_seconds: bool


def validate(expr: str, tz: str) -> None:
    """Raise `CronError` unless ``expr`` parses, ``tz`` is an IANA key, and the schedule fires
    at all (``'0 0 30 2 *'`` never does; ``'0 0 * 2 1#5'`` does, in 2044)."""
    if next_fire(expr, tz, datetime.now(UTC)) is None:
        raise CronError(f"cron expression {expr!r} never fires (no occurrence within {LOOKAHEAD.days // 365} years)")


def expand(
    expr: str,
    tz: str,
    start: datetime,
    end: datetime,
    *,
    gap: GapPolicy = GapPolicy.RUN,
    overlap: OverlapPolicy = OverlapPolicy.ONCE,
    limit: int | None = None,
) -> list[Occurrence]:
    """Every occurrence with ``start <= fire_at < end``, sorted and unique by ``fire_at``.

    ``start`` and ``end`` must be aware (any zone). Expanding ``[a, c)`` equals expanding
    ``[a, b)`` then ``[b, c)``. Nominal times that land on one instant (``02:00`` shifted out of
    a gap onto ``03:00``) are one occurrence: the one that was not shifted, else the earliest.
    ``limit`` keeps only the earliest ones. Raises `CronError` for a bad expression or zone.
    """
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    fired: list[Occurrence] = []
    for page in _pages(_compile(expr, tz), start, end, GapPolicy(gap), OverlapPolicy(overlap)):
        fired.extend(occurrence for occurrence, decision in page if decision in _FIRING)
        if limit is not None and len(fired) >= limit:
            break
    return fired if limit is None else fired[:limit]


def explain(
    expr: str,
    tz: str,
    start: datetime,
    end: datetime,
    *,
    gap: GapPolicy = GapPolicy.RUN,
    overlap: OverlapPolicy = OverlapPolicy.ONCE,
) -> list[tuple[Occurrence, str]]:
    """Like `expand`, but also the occurrences the policies dropped, each with its `Decision`.

    A dropped occurrence carries the ``fire_at`` where it would have landed; rows are sorted by
    ``fire_at``, then ``nominal``. Elapsed-time schedules list no rows for wall times inside a
    gap: those times never happen, so there is nothing to decide.
    """
    schedule = _compile(expr, tz)
    return [row for page in _pages(schedule, start, end, GapPolicy(gap), OverlapPolicy(overlap)) for row in page]


def iter_explain(
    expr: str,
    tz: str,
    start: datetime,
    end: datetime,
    *,
    gap: GapPolicy = GapPolicy.RUN,
    overlap: OverlapPolicy = OverlapPolicy.ONCE,
) -> Iterator[tuple[Occurrence, str]]:
    """`explain` computed lazily: rows are found page by page (pages double from one minute), so
    a caller that stops after n fires has paid for at most about 2n, whatever the window."""
    schedule = _compile(expr, tz)
    for page in _pages(schedule, start, end, GapPolicy(gap), OverlapPolicy(overlap)):
        yield from page


def last_fires(
    expr: str,
    tz: str,
    start: datetime,
    end: datetime,
    n: int,
    *,
    gap: GapPolicy = GapPolicy.RUN,
    overlap: OverlapPolicy = OverlapPolicy.ONCE,
) -> tuple[list[Occurrence], int]:
    """The last ``n`` occurrences with ``start <= fire_at < end``, oldest first, and how many
    occurrences were computed to find them.

    Searches backwards from ``end`` in pages that double from one minute, so the cost follows
    ``n``, not the length of the window (a year of a seconds schedule costs what 2n fires cost).
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    schedule = _compile(expr, tz)
    lo, hi = _utc(start, "start"), _utc(end, "end")
    found: list[Occurrence] = []
    computed = 0
    page = _FIRST_PAGE
    while hi > lo and len(found) < n:
        begin = lo if hi - lo <= page else hi - page
        rows = _explain_window(schedule, _WallCursor(schedule.expr), begin, hi, GapPolicy(gap), OverlapPolicy(overlap))
        computed += len(rows)
        found = [occurrence for occurrence, decision in rows if decision in _FIRING] + found
        hi, page = begin, page * 2
    return (found[-n:] if n else []), computed


def next_fire(
    expr: str,
    tz: str,
    after: datetime,
    *,
    gap: GapPolicy = GapPolicy.RUN,
    overlap: OverlapPolicy = OverlapPolicy.ONCE,
) -> Occurrence | None:
    """The first occurrence with ``fire_at > after``, or None if there is none within `LOOKAHEAD` (49 years)."""
    start = _utc(after, "after") + timedelta(microseconds=1)
    found = expand(expr, tz, start, start + _HORIZON, gap=gap, overlap=overlap, limit=1)
    return found[0] if found else None


def select_misfires(missed: Sequence[Occurrence], policy: MisfirePolicy, cap: int = 100) -> list[Occurrence]:
    """Which of the occurrences already past due to run now, oldest first.

    SKIP runs none, LATEST the most recent one, ALL the most recent ``cap`` ones.
    """
    if cap < 1:
        raise ValueError("cap must be >= 1")
    ordered = sorted(missed, key=lambda occurrence: occurrence.fire_at)
    match MisfirePolicy(policy):
        case MisfirePolicy.SKIP:
            return []
        case MisfirePolicy.LATEST:
            return ordered[-1:]
        case MisfirePolicy.ALL:
            return ordered[-cap:]


# --- parsing -----------------------------------------------------------------------------------


@lru_cache(maxsize=512)
def _compile(expr: str, tz: str) -> _Schedule:
    """Check ``expr`` and ``tz``; raise `CronError` naming the problem."""
    if not isinstance(expr, str):
        raise CronError(f"cron expression must be a string, not {type(expr).__name__}")
    tz_zone = zone(tz)
    expr = MACROS.get(expr.strip().lower(), expr)
    fields = expr.split()
    try:
        CronSim(expr, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise CronError(f"invalid cron expression {expr!r}: {_explain_error(fields, str(exc))}") from None
    minute, hour = fields[-5], fields[-4]
    fixed = not minute.startswith("*") and not hour.startswith("*")
    return _Schedule(expr=expr, zone=tz_zone, fixed=fixed, has_seconds=len(fields) == 6)


def zone(tz: str) -> ZoneInfo:
    """The zone for an IANA key such as ``Europe/Berlin``, ``UTC`` or ``Etc/GMT-5``, read from the
    pinned ``tzdata`` package, never from the host's zone files: every scanner computes the same
    instants whatever its host's zone database. Raises `CronError` for an unknown key."""
    if not isinstance(tz, str):
        raise CronError(f"unknown time zone {tz!r} (expected an IANA key such as 'Europe/Berlin')")
    return _zone(tz)


def zone_source() -> str:
    """Where zones come from: the tzdata package and its version (IANA release)."""
    return f"tzdata {tzdata.IANA_VERSION}"


@lru_cache(maxsize=1024)
def _zone(tz: str) -> ZoneInfo:
    if not _ZONE_KEY.fullmatch(tz) or tz.startswith(_HOST_ZONES) or tz in ("Factory",):
        raise CronError(f"unknown time zone {tz!r} (expected an IANA key such as 'Europe/Berlin')")
    node = resources.files("tzdata.zoneinfo").joinpath(*tz.split("/"))
    try:
        with node.open("rb") as data:
            if data.read(4) != b"TZif":
                raise ValueError("not a TZif file")
            data.seek(0)
            return ZoneInfo.from_file(data, key=tz)
    except (ValueError, OSError):
        raise CronError(f"unknown time zone {tz!r} (not in tzdata {tzdata.IANA_VERSION})") from None


def _explain_error(fields: list[str], reason: str) -> str:
    """Turn cronsim's terse reason ("Bad minute") into what the user should fix."""
    if not fields:
        return "it is empty"
    if fields[0].startswith("@"):
        return f"the only '@' macros are {', '.join(MACROS)} (@reboot names no instant)"
    if len(fields) not in (5, 6):
        return (
            f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, got {len(fields)}"
        )
    specs = _FIELDS[-len(fields) :]
    names = [name for name, _, _ in specs]
    name = reason.removeprefix("Bad ")
    if name not in names:
        return reason
    index = names.index(name)
    token = fields[index]
    _, lowest, highest = specs[index]
    for value in _plain_values(token, name):
        if not lowest <= value <= highest:
            return f"{name} must be {lowest}-{highest}, got {value}"
    if name == "day-of-month":
        any_month = [*fields[: index + 1], "*", *fields[index + 2 :]]
        try:
            CronSim(" ".join(any_month), datetime(2000, 1, 1))
        except CronSimError:
            pass
        else:
            return f"it can never fire: day {token} does not occur in month {fields[index + 1]}"
    return f"cannot parse {name} field {token!r}"


def _plain_values(token: str, name: str) -> Iterator[int]:
    """The plain numbers a field names (not steps, nor the n of ``MON#n``)."""
    for term in token.upper().split(","):
        term = term.split("/", 1)[0]
        if name == "day-of-week":
            term = term.split("#", 1)[0].removesuffix("L")
        for piece in term.split("-"):
            if piece.isascii() and piece.isdigit():
                yield int(piece)


# --- expansion ---------------------------------------------------------------------------------


def _pages(
    schedule: _Schedule, start: datetime, end: datetime, gap: GapPolicy, overlap: OverlapPolicy
) -> Iterator[list[tuple[Occurrence, str]]]:
    """Explained rows for ``[start, end)`` as consecutive sorted pages of doubling length."""
    lo, end = _utc(start, "start"), _utc(end, "end")
    walls = _WallCursor(schedule.expr)
    page = _FIRST_PAGE
    while lo < end:
        hi = end if end - lo <= page else lo + page
        yield _explain_window(schedule, walls, lo, hi, gap, overlap)
        lo, page = hi, page * 2


def _explain_window(
    schedule: _Schedule,
    walls: _WallCursor,
    start: datetime,
    end: datetime,
    gap: GapPolicy,
    overlap: OverlapPolicy,
) -> list[tuple[Occurrence, str]]:
    """Explained rows with ``start <= fire_at < end`` (UTC), sorted, duplicates marked."""
    # Every wall time that can land in the window lies in [start + lowest, end + highest):
    # a time inside a gap starting at `start` sits at start + (offset just before start).
    lowest, highest = _offset_range(schedule.zone, start - _SECOND, end)
    first = _ceil_second((start + lowest).replace(tzinfo=None))
    stop = (end + highest).replace(tzinfo=None)
    rows: list[tuple[Occurrence, Decision]] = []
    wall = walls.first_at_or_after(first)
    while wall is not None and wall < stop:
        rows.extend(
            (occurrence, decision)
            for occurrence, decision in _candidates(schedule, wall, gap, overlap)
            if start <= occurrence.fire_at < end
        )
        wall = walls.first_at_or_after(wall + _SECOND)
    rows.sort(key=lambda row: (row[0].fire_at, row[0].nominal))
    return _merge_same_instant(rows)


def _candidates(
    schedule: _Schedule, wall: datetime, gap: GapPolicy, overlap: OverlapPolicy
) -> Iterator[tuple[Occurrence, Decision]]:
    """The occurrence(s) one matching wall-clock time stands for, with the policies' decision."""
    zone = schedule.zone
    nominal = wall.isoformat(timespec="seconds" if schedule.has_seconds else "minutes")
    # PEP 495: fold=0 takes the offset in force before a transition, fold=1 the one after.
    before, after = _offset(wall.replace(tzinfo=zone)), _offset(wall.replace(tzinfo=zone, fold=1))

    def occurrence(utc_wall: datetime, dst: Dst | None) -> Occurrence:
        fire_at = utc_wall.replace(tzinfo=UTC)
        return Occurrence(fire_at=fire_at, local=fire_at.astimezone(zone), nominal=nominal, dst=dst)

    if before == after:
        yield occurrence(wall - before, None), Decision.FIRE
    elif before > after:  # fall back: this wall time happens twice, `before - after` apart
        if not schedule.fixed:
            yield occurrence(wall - before, None), Decision.FIRE
            yield occurrence(wall - after, None), Decision.FIRE
            return
        second = Decision.FIRE_OVERLAP_SECOND if overlap is OverlapPolicy.TWICE else Decision.SKIPPED_OVERLAP
        yield occurrence(wall - before, Dst.OVERLAP_FIRST), Decision.FIRE
        yield occurrence(wall - after, Dst.OVERLAP_SECOND), second
    elif schedule.fixed:  # spring forward: this wall time does not exist
        shifted = _transition(zone, wall - after, wall - before)
        decision = Decision.FIRE if gap is GapPolicy.RUN else Decision.SKIPPED_GAP
        yield occurrence(shifted, Dst.GAP_SHIFTED), decision


def _merge_same_instant(rows: list[tuple[Occurrence, Decision]]) -> list[tuple[Occurrence, str]]:
    """Mark all but one firing row per instant as SKIPPED_DUPLICATE (rows sorted by instant, then
    nominal): the row that was not gap-shifted wins, else the earliest nominal time."""
    winners: dict[datetime, Occurrence] = {}
    for occurrence, decision in rows:
        if decision in _FIRING:
            best = winners.get(occurrence.fire_at)
            if best is None or (best.dst == Dst.GAP_SHIFTED and occurrence.dst != Dst.GAP_SHIFTED):
                winners[occurrence.fire_at] = occurrence
    return [
        (occurrence, Decision.SKIPPED_DUPLICATE)
        if decision in _FIRING and winners[occurrence.fire_at] is not occurrence
        else (occurrence, decision)
        for occurrence, decision in rows
    ]


class _WallCursor:
    """Matching wall-clock times of one expression, found by cronsim on naive datetimes.

    With no time zone cronsim does calendar matching only. The last answer is kept, so a forward
    scan restarts cronsim only when it moves backwards (after a fall-back) or jumps ahead.
    """

    __slots__ = ("_asked", "_expr", "_found", "_sim")

    def __init__(self, expr: str) -> None:
        self._expr = expr
        self._sim: CronSim | None = None
        self._asked: datetime | None = None
        self._found: datetime | None = None  # first match >= _asked; None: none within cronsim's horizon

    def first_at_or_after(self, wall: datetime) -> datetime | None:
        """The first matching wall time at or after ``wall`` (whole seconds), or None if none
        within cronsim's horizon."""
        asked, found = self._asked, self._found
        if asked is not None and asked <= wall:
            if found is None and wall - asked < _CRONSIM_HORIZON:
                return None
            if found is not None and wall <= found:
                return found
            if found is not None and wall == found + _SECOND:
                return self._advance(wall)
        try:
            self._sim = CronSim(self._expr, wall - _SECOND)
        except OverflowError:
            self._sim = None
        return self._advance(wall)

    def _advance(self, wall: datetime) -> datetime | None:
        try:
            found = next(self._sim) if self._sim is not None else None
        except (StopIteration, OverflowError):
            found = None
        self._asked, self._found = wall, found
        return found


# --- time helpers ------------------------------------------------------------------------------


def _utc(moment: datetime, name: str) -> datetime:
    if moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {moment!r}")
    return moment.astimezone(UTC)


def _offset(moment: datetime) -> timedelta:
    offset = moment.utcoffset()
    assert offset is not None  # ZoneInfo always knows its offset
    return offset


def _offset_at(zone: tzinfo, utc: datetime) -> timedelta:
    return _offset(utc.replace(tzinfo=UTC).astimezone(zone))


def _offset_range(zone: tzinfo, start: datetime, end: datetime) -> tuple[timedelta, timedelta]:
    """The smallest and largest UTC offset ``zone`` has at any instant in ``[start, end]``."""
    offsets = {_offset_at(zone, end)}
    moment = start
    while moment < end:
        offsets.add(_offset_at(zone, moment))
        moment += _OFFSET_SAMPLE
    return min(offsets), max(offsets)


def _transition(zone: tzinfo, before: datetime, after: datetime) -> datetime:
    """The instant (naive UTC) a zone's offset changes, knowing it changes once in ``(before, after]``."""
    old = _offset_at(zone, before)
    low, high = 0, int((after - before).total_seconds())
    while high - low > 1:
        middle = (low + high) // 2
        if _offset_at(zone, before + timedelta(seconds=middle)) == old:
            low = middle
        else:
            high = middle
    return before + timedelta(seconds=high)


def _ceil_second(moment: datetime) -> datetime:
    return moment if not moment.microsecond else moment.replace(microsecond=0) + _SECOND
