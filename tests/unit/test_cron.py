"""pgsched.core.cron: DST policies at fixed dates, cronsim agreement, errors, misfires, speed."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from pgsched.core import cron
from pgsched.core.cron import (
    CronError,
    GapPolicy,
    MisfirePolicy,
    Occurrence,
    OverlapPolicy,
    expand,
    explain,
    next_fire,
    select_misfires,
    validate,
)

RUN, SKIP = GapPolicy.RUN, GapPolicy.SKIP
ONCE, TWICE = OverlapPolicy.ONCE, OverlapPolicy.TWICE
POLICIES = [(RUN, ONCE), (RUN, TWICE), (SKIP, ONCE), (SKIP, TWICE)]

# 2026 transitions used below (UTC instant: local clock jump):
#   Europe/Berlin        2026-03-29T01:00Z 02:00 -> 03:00 (CEST)    2026-10-25T01:00Z 03:00 -> 02:00 (CET)
#   America/New_York     2026-03-08T07:00Z 02:00 -> 03:00 (EDT)     2026-11-01T06:00Z 02:00 -> 01:00 (EST)
#   Australia/Lord_Howe  2026-10-03T15:30Z 02:00 -> 02:30 (+11)     2026-04-04T15:00Z 02:00 -> 01:30 (+10:30)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local_day(tz: str, day: str) -> tuple[datetime, datetime]:
    """The local calendar day as a UTC window (23, 24, 24.5, 25 ... hours long)."""
    zone = ZoneInfo(tz)
    midnight = datetime.fromisoformat(day)
    return midnight.replace(tzinfo=zone), (midnight + timedelta(days=1)).replace(tzinfo=zone)


def summary(occurrences: list[Occurrence]) -> list[tuple[str, str, str | None]]:
    return [(o.fire_at.strftime("%Y-%m-%dT%H:%M:%S"), o.nominal, o.dst) for o in occurrences]


def test_public_api_is_pinned() -> None:
    assert sorted(cron.__all__) == [
        "CronError",
        "Decision",
        "Dst",
        "GapPolicy",
        "LOOKAHEAD",
        "MACROS",
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
    assert [p.value for p in GapPolicy] == ["run", "skip"]
    assert [p.value for p in OverlapPolicy] == ["once", "twice"]
    assert [p.value for p in MisfirePolicy] == ["skip", "latest", "all"]


# --- fixed-time schedules on DST days ------------------------------------------------------------

FIXED_TIME_CASES = [
    # Spring forward: 02:30 does not exist; RUN fires at the end of the gap, SKIP not at all.
    ("30 2 * * *", "Europe/Berlin", "2026-03-29", RUN, ONCE,
     [("2026-03-29T01:00:00", "2026-03-29T02:30", "gap_shifted")]),
    ("30 2 * * *", "Europe/Berlin", "2026-03-29", SKIP, ONCE, []),
    ("30 2 * * *", "America/New_York", "2026-03-08", RUN, ONCE,
     [("2026-03-08T07:00:00", "2026-03-08T02:30", "gap_shifted")]),
    ("30 2 * * *", "America/New_York", "2026-03-08", SKIP, TWICE, []),
    # Fall back: 02:30 happens twice in Berlin (CEST, then CET one hour later).
    ("30 2 * * *", "Europe/Berlin", "2026-10-25", RUN, ONCE,
     [("2026-10-25T00:30:00", "2026-10-25T02:30", "overlap_first")]),
    ("30 2 * * *", "Europe/Berlin", "2026-10-25", SKIP, TWICE,
     [("2026-10-25T00:30:00", "2026-10-25T02:30", "overlap_first"),
      ("2026-10-25T01:30:00", "2026-10-25T02:30", "overlap_second")]),
    # New York repeats 01:00-02:00, not 02:00-03:00: 02:30 EST happens once, whatever the policy.
    # (The brief expected 06:30Z/07:30Z here; those are 01:30 EST and 02:30 EST.)
    ("30 2 * * *", "America/New_York", "2026-11-01", RUN, ONCE,
     [("2026-11-01T07:30:00", "2026-11-01T02:30", None)]),
    ("30 2 * * *", "America/New_York", "2026-11-01", RUN, TWICE,
     [("2026-11-01T07:30:00", "2026-11-01T02:30", None)]),
    ("30 1 * * *", "America/New_York", "2026-11-01", RUN, ONCE,
     [("2026-11-01T05:30:00", "2026-11-01T01:30", "overlap_first")]),
    ("30 1 * * *", "America/New_York", "2026-11-01", RUN, TWICE,
     [("2026-11-01T05:30:00", "2026-11-01T01:30", "overlap_first"),
      ("2026-11-01T06:30:00", "2026-11-01T01:30", "overlap_second")]),
    # Lord Howe moves its clock by 30 minutes: the gap is 02:00-02:30, the overlap 01:30-02:00.
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-04", RUN, ONCE,
     [("2026-10-03T15:30:00", "2026-10-04T02:15", "gap_shifted")]),
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-05", RUN, TWICE,
     [("2026-04-04T14:45:00", "2026-04-05T01:45", "overlap_first"),
      ("2026-04-04T15:15:00", "2026-04-05T01:45", "overlap_second")]),
    ("30 2 * * *", "Australia/Lord_Howe", "2026-04-05", RUN, TWICE,
     [("2026-04-04T16:00:00", "2026-04-05T02:30", None)]),
    # The seconds form follows the same rule (cronsim alone would never fire it on 03-29, and
    # would fire it twice on 10-25 whatever the policy). The shift goes to the end of the gap,
    # 03:00:00, not to 03:00:30.
    ("30 30 2 * * *", "Europe/Berlin", "2026-03-29", RUN, ONCE,
     [("2026-03-29T01:00:00", "2026-03-29T02:30:30", "gap_shifted")]),
    ("0 30 2 * * *", "Europe/Berlin", "2026-10-25", RUN, ONCE,
     [("2026-10-25T00:30:00", "2026-10-25T02:30:00", "overlap_first")]),
]  # fmt: skip


@pytest.mark.parametrize(("expr", "tz", "day", "gap", "overlap", "expected"), FIXED_TIME_CASES)
def test_fixed_time_on_dst_days(
    expr: str,
    tz: str,
    day: str,
    gap: GapPolicy,
    overlap: OverlapPolicy,
    expected: list[tuple[str, str, str | None]],
) -> None:
    start, end = local_day(tz, day)
    assert summary(expand(expr, tz, start, end, gap=gap, overlap=overlap)) == expected


def test_local_is_the_fire_instant_in_the_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    [shifted] = expand("30 2 * * *", "Europe/Berlin", *local_day("Europe/Berlin", "2026-03-29"))
    assert shifted.local == datetime(2026, 3, 29, 3, 0, tzinfo=berlin)
    assert shifted.local.utcoffset() == timedelta(hours=2)
    first, second = expand("30 2 * * *", "Europe/Berlin", *local_day("Europe/Berlin", "2026-10-25"), overlap=TWICE)
    assert (first.local.utcoffset(), second.local.utcoffset()) == (timedelta(hours=2), timedelta(hours=1))
    assert (first.local.fold, second.local.fold) == (0, 1)
    assert first.fire_at.tzinfo is UTC


def test_explain_lists_what_the_policies_dropped() -> None:
    gap_day = local_day("Europe/Berlin", "2026-03-29")
    [(occurrence, decision)] = explain("30 2 * * *", "Europe/Berlin", *gap_day, gap=SKIP)
    assert (occurrence.fire_at, occurrence.dst, decision) == (
        utc("2026-03-29T01:00"),
        "gap_shifted",
        "skipped_gap",
    )

    overlap_day = local_day("Europe/Berlin", "2026-10-25")
    once = [(o.fire_at, o.dst, d) for o, d in explain("30 2 * * *", "Europe/Berlin", *overlap_day)]
    assert once == [
        (utc("2026-10-25T00:30"), "overlap_first", "fire"),
        (utc("2026-10-25T01:30"), "overlap_second", "skipped_overlap"),
    ]
    twice = [d for _, d in explain("30 2 * * *", "Europe/Berlin", *overlap_day, overlap=TWICE)]
    assert twice == ["fire", "fire_overlap_second"]


def test_times_landing_on_one_instant_fire_once() -> None:
    # 02:00 is shifted to the end of the gap, 03:00 CEST, which the schedule names anyway.
    gap_day = local_day("Europe/Berlin", "2026-03-29")
    assert summary(expand("0 2,3 * * *", "Europe/Berlin", *gap_day)) == [
        ("2026-03-29T01:00:00", "2026-03-29T03:00", None)
    ]
    run = [(o.nominal, o.dst, d) for o, d in explain("0 2,3 * * *", "Europe/Berlin", *gap_day)]
    assert run == [
        ("2026-03-29T02:00", "gap_shifted", "skipped_duplicate"),
        ("2026-03-29T03:00", None, "fire"),
    ]
    skip = [d for _, d in explain("0 2,3 * * *", "Europe/Berlin", *gap_day, gap=SKIP)]
    assert skip == ["skipped_gap", "fire"]
    # Two shifted times and nothing else at that instant: the earliest nominal time stands.
    rows = [(o.nominal, d) for o, d in explain("0,15 2 * * *", "Europe/Berlin", *gap_day)]
    assert rows == [("2026-03-29T02:00", "fire"), ("2026-03-29T02:15", "skipped_duplicate")]
    # On Lord Howe 02:00 shifts onto 02:30, a real time the schedule also names.
    lord_howe = local_day("Australia/Lord_Howe", "2026-10-04")
    assert summary(expand("0,30 2 * * *", "Australia/Lord_Howe", *lord_howe)) == [
        ("2026-10-03T15:30:00", "2026-10-04T02:30", None)
    ]


# --- elapsed-time (wildcard hour or minute) schedules on DST days --------------------------------

# These follow elapsed time, as in Debian cron and cronsim: an hour that does not exist has no
# occurrences (so nothing is gap-shifted, and GapPolicy.SKIP has nothing to remove), and an hour
# that happens twice has occurrences in both passes (OverlapPolicy does not apply). Every policy
# combination therefore gives the same count:
#   23-hour day:   0 * * * * -> 23, */15 -> 23 * 4 = 92
#   25-hour day:   0 * * * * -> 25, */15 -> 25 * 4 = 100
#   Lord Howe, 23.5-hour day: the missing 02:00-02:30 holds one :00 and one :15 -> 23 and 94;
#   24.5-hour day: the repeated 01:30-02:00 holds no :00 and two quarter-hours -> 24 and 98.
WILDCARD_COUNTS = [
    ("0 * * * *", "Europe/Berlin", "2026-03-29", 23),
    ("0 * * * *", "Europe/Berlin", "2026-10-25", 25),
    ("*/15 * * * *", "Europe/Berlin", "2026-03-29", 92),
    ("*/15 * * * *", "Europe/Berlin", "2026-10-25", 100),
    ("0 * * * *", "America/New_York", "2026-03-08", 23),
    ("0 * * * *", "America/New_York", "2026-11-01", 25),
    ("*/15 * * * *", "America/New_York", "2026-03-08", 92),
    ("*/15 * * * *", "America/New_York", "2026-11-01", 100),
    ("0 * * * *", "Australia/Lord_Howe", "2026-10-04", 23),
    ("0 * * * *", "Australia/Lord_Howe", "2026-04-05", 24),
    ("*/15 * * * *", "Australia/Lord_Howe", "2026-10-04", 94),
    ("*/15 * * * *", "Australia/Lord_Howe", "2026-04-05", 98),
    ("0 * * * *", "Europe/Berlin", "2026-06-01", 24),
]


@pytest.mark.parametrize(("expr", "tz", "day", "count"), WILDCARD_COUNTS)
@pytest.mark.parametrize(("gap", "overlap"), POLICIES)
def test_wildcard_counts_on_dst_days(
    expr: str, tz: str, day: str, count: int, gap: GapPolicy, overlap: OverlapPolicy
) -> None:
    rows = explain(expr, tz, *local_day(tz, day), gap=gap, overlap=overlap)
    assert len(rows) == count
    assert {(o.dst, d) for o, d in rows} == {(None, "fire")}


def test_wildcard_hour_fires_in_both_passes() -> None:
    day = local_day("Europe/Berlin", "2026-10-25")
    fires = [o.fire_at for o in expand("0 * * * *", "Europe/Berlin", *day)]
    assert fires[:4] == [
        utc("2026-10-24T22:00"),
        utc("2026-10-24T23:00"),
        utc("2026-10-25T00:00"),
        utc("2026-10-25T01:00"),
    ]
    nominal = [o.nominal[11:] for o in expand("0 * * * *", "Europe/Berlin", *day)]
    assert nominal[:4] == ["00:00", "01:00", "02:00", "02:00"]


def test_wildcard_minute_with_fixed_hour_follows_elapsed_time() -> None:
    # '*/15 2 * * *' is not fixed-time (its minute field starts with '*'), as in Debian cron.
    assert expand("*/15 2 * * *", "Europe/Berlin", *local_day("Europe/Berlin", "2026-03-29")) == []
    assert len(expand("*/15 2 * * *", "Europe/Berlin", *local_day("Europe/Berlin", "2026-10-25"))) == 8
    # After Lord Howe's 30-minute fall back, 02:00-02:59 exists once. (cronsim 2.8, iterating
    # by itself, steps from 01:30 to 02:30 by whole hours and misses 02:00 and 02:15.)
    fires = expand("*/15 2 * * *", "Australia/Lord_Howe", *local_day("Australia/Lord_Howe", "2026-04-05"))
    assert [o.local.strftime("%H:%M%z") for o in fires] == [
        "02:00+1030",
        "02:15+1030",
        "02:30+1030",
        "02:45+1030",
    ]


# --- agreement with cronsim ----------------------------------------------------------------------


def cronsim_fires(expr: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """cronsim's own answer, iterated from a week before the window."""
    fires = []
    for moment in CronSim(expr, (start - timedelta(days=7)).astimezone(ZoneInfo(tz))):
        fire_at = moment.astimezone(UTC)
        if fire_at >= end:
            break
        if fire_at >= start:
            fires.append(fire_at)
    return fires


TRANSITIONS = {
    "Europe/Berlin": ["2026-03-29T01:00", "2026-10-25T01:00"],
    "America/New_York": ["2026-03-08T07:00", "2026-11-01T06:00"],
    "Australia/Lord_Howe": ["2026-04-04T15:00", "2026-10-03T15:30"],
}


AGREEMENT_EXPRS = ["30 2 * * *", "30 1 * * *", "0 2,3 * * *", "0,15,30,45 2 * * *", "0 1-3 * * *",
                   "0 0-23/2 * * *", "59 1 * * *", "0 * * * *", "*/15 * * * *", "*/7 * * * *", "0 */2 * * *",
                   "*/10 1,2 * * *", "0 0 * * 0"]  # fmt: skip
# cronsim 2.8 iterates elapsed-time schedules by whole hours from the top of a non-matching hour;
# after a 30-minute fall back that lands on :30 and misses the :00-:29 of the next hour.
CRONSIM_MISSES = {("0 */2 * * *", "Australia/Lord_Howe"), ("*/15 2 * * *", "Australia/Lord_Howe")}


@pytest.mark.parametrize(
    ("expr", "tz"),
    [(expr, tz) for expr in AGREEMENT_EXPRS for tz in sorted(TRANSITIONS) if (expr, tz) not in CRONSIM_MISSES],
)
def test_default_policies_match_cronsim(expr: str, tz: str) -> None:
    for transition in TRANSITIONS[tz]:
        start, end = utc(transition) - timedelta(days=1), utc(transition) + timedelta(days=1)
        assert [o.fire_at for o in expand(expr, tz, start, end)] == cronsim_fires(expr, tz, start, end)


@pytest.mark.parametrize(("expr", "tz"), sorted(CRONSIM_MISSES))
def test_where_cronsim_misses_a_time_after_a_half_hour_fall_back(expr: str, tz: str) -> None:
    start, end = local_day(tz, "2026-04-05")
    ours = {o.fire_at for o in expand(expr, tz, start, end)}
    theirs = set(cronsim_fires(expr, tz, start, end))
    missed = sorted(f"{moment.astimezone(ZoneInfo(tz)):%H:%M%z}" for moment in ours - theirs)
    assert theirs < ours
    assert missed == (["02:00+1030"] if expr == "0 */2 * * *" else ["02:00+1030", "02:15+1030"])


# --- windows ---------------------------------------------------------------------------------------


def test_window_is_half_open_and_zone_agnostic() -> None:
    start, end = utc("2026-05-01T08:00"), utc("2026-05-01T09:00")
    fires = [o.fire_at for o in expand("0 * * * *", "UTC", start, end)]
    assert fires == [start]
    berlin = ZoneInfo("Europe/Berlin")
    assert expand("*/5 * * * *", "Asia/Kolkata", start, end) == expand(
        "*/5 * * * *", "Asia/Kolkata", start.astimezone(berlin), end.astimezone(berlin)
    )
    assert expand("* * * * *", "UTC", end, start) == []


def test_half_hour_zone_has_no_dst_markers() -> None:
    fires = expand("30 2 * * *", "Asia/Kolkata", utc("2026-03-01T00:00"), utc("2026-04-01T00:00"))
    assert len(fires) == 31
    assert fires[0].fire_at == utc("2026-03-01T21:00")  # 02:30 IST on 03-02; 03-01's was at 02-28 21:00Z
    assert {o.dst for o in fires} == {None}


def test_limit_keeps_the_earliest() -> None:
    day = local_day("Europe/Berlin", "2026-10-25")
    every = expand("*/15 * * * *", "Europe/Berlin", *day)
    assert expand("*/15 * * * *", "Europe/Berlin", *day, limit=5) == every[:5]
    assert expand("*/15 * * * *", "Europe/Berlin", *day, limit=0) == []
    assert expand("*/15 * * * *", "Europe/Berlin", *day, limit=1000) == every
    with pytest.raises(ValueError, match="limit"):
        expand("*/15 * * * *", "Europe/Berlin", *day, limit=-1)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        expand("* * * * *", "UTC", datetime(2026, 1, 1), utc("2026-01-02T00:00"))
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire("* * * * *", "UTC", datetime(2026, 1, 1))


def test_policies_accept_their_string_values() -> None:
    day = local_day("Europe/Berlin", "2026-10-25")
    fires = expand("30 2 * * *", "Europe/Berlin", *day, overlap="twice")  # type: ignore[arg-type]
    assert len(fires) == 2


# --- next_fire -------------------------------------------------------------------------------------


def test_next_fire_around_a_gap() -> None:
    before_gap = next_fire("30 2 * * *", "Europe/Berlin", utc("2026-03-29T00:59:59"))
    assert before_gap is not None
    assert (before_gap.fire_at, before_gap.dst) == (utc("2026-03-29T01:00"), "gap_shifted")
    # Strictly after: from the shifted instant itself the next one is the following day's 02:30 CEST.
    at_gap = next_fire("30 2 * * *", "Europe/Berlin", utc("2026-03-29T01:00"))
    assert at_gap is not None
    assert at_gap.fire_at == utc("2026-03-30T00:30")
    skipped = next_fire("30 2 * * *", "Europe/Berlin", utc("2026-03-29T00:00"), gap=SKIP)
    assert skipped is not None
    assert skipped.fire_at == utc("2026-03-30T00:30")


def test_next_fire_from_inside_an_overlap() -> None:
    # 01:10Z is 02:10 CET, the second pass. cronsim started here returns 00:30Z, in the past.
    after = utc("2026-10-25T01:10")
    once = next_fire("30 2 * * *", "Europe/Berlin", after)
    twice = next_fire("30 2 * * *", "Europe/Berlin", after, overlap=TWICE)
    assert once is not None
    assert twice is not None
    assert once.fire_at == utc("2026-10-26T01:30")
    assert (twice.fire_at, twice.dst) == (utc("2026-10-25T01:30"), "overlap_second")


def test_next_fire_sub_second_and_far() -> None:
    found = next_fire("0 * * * *", "UTC", utc("2026-01-01T09:59:59.999999"))
    assert found is not None
    assert found.fire_at == utc("2026-01-01T10:00")
    leap = next_fire("0 0 29 2 *", "Europe/Berlin", utc("2026-03-01T00:00"))
    assert leap is not None
    assert leap.fire_at == utc("2028-02-28T23:00")
    assert next_fire("0 0 */31 * MON#5", "UTC", utc("2026-01-01T00:00")) is None


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "tz", "message"),
    [
        ("61 * * * *", "UTC", "invalid cron expression '61 * * * *': minute must be 0-59, got 61"),
        ("0 24 * * *", "UTC", "hour must be 0-23, got 24"),
        ("0 0 0 * *", "UTC", "day-of-month must be 1-31, got 0"),
        ("0 0 * 1-13 *", "UTC", "month must be 1-12, got 13"),
        ("0 0 * * 8", "UTC", "day-of-week must be 0-7, got 8"),
        ("60 0 0 * * *", "UTC", "second must be 0-59, got 60"),
        ("* * 30 2 *", "UTC", "it can never fire: day 30 does not occur in month 2"),
        ("0 0 */31 * MON#5", "UTC", "never fires (no occurrence within 49 years)"),
        ("*/0 * * * *", "UTC", "cannot parse minute field '*/0'"),
        ("0 0 15W * *", "UTC", "cannot parse day-of-month field '15W'"),
        ("", "UTC", "invalid cron expression '': it is empty"),
        ("   ", "UTC", "it is empty"),
        ("@reboot", "UTC", "the only '@' macros are @yearly"),
        ("@fortnightly", "UTC", "the only '@' macros are @yearly"),
        ("* * * *", "UTC", "expected 5 fields (minute hour day-of-month month day-of-week) or 6"),
        ("0 0 * * * * *", "UTC", "got 7"),
        ("0 0 * * *", "Mars/Base", "unknown time zone 'Mars/Base'"),
        ("0 0 * * *", "+05:00", "unknown time zone '+05:00'"),
        ("0 0 * * *", "", "unknown time zone ''"),
        ("0 0 * * *", "europe/berlin", "unknown time zone 'europe/berlin'"),
        ("0 0 * * *", "right/UTC", "unknown time zone 'right/UTC'"),
        ("0 0 * * *", "localtime", "unknown time zone 'localtime'"),
        ("0 0 * * *", "../etc/passwd", "unknown time zone '../etc/passwd'"),
    ],
)
def test_validate_says_what_is_wrong(expr: str, tz: str, message: str) -> None:
    with pytest.raises(CronError) as raised:
        validate(expr, tz)
    assert message in str(raised.value)


GARBAGE = [
    "hello world",
    "* * * * * * * *",
    "1-/5 * * * *",
    "a b c d e",
    "0 0 32 * *",
    "0 0 * * MON-",
    "0 0 ? * *",
    "5-3 * * * *",
    "💥 * * * *",
    "0 0 * JANUARY *",
]


@pytest.mark.parametrize("expr", GARBAGE)
def test_garbage_is_refused(expr: str) -> None:
    with pytest.raises(CronError, match=r"^invalid cron expression"):
        validate(expr, "UTC")
    with pytest.raises(CronError):
        expand(expr, "UTC", utc("2026-01-01T00:00"), utc("2026-01-02T00:00"))


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(alphabet="0123456789*/,-#LW? MONJANSUFRI@x", max_size=30))
def test_any_text_is_accepted_or_refused_with_cron_error(expr: str) -> None:
    with contextlib.suppress(CronError):
        validate(expr, "UTC")


@pytest.mark.parametrize(
    "expr",
    ["0 9 * * MON-FRI", "0 9 * jan,jul mon", "0 0 L * *", "0 0 LW * *", "0 0 * * 5L", "0 0 * * MON#2",
     "*/30 * * * * *", "0 0 1,15 * 1", "0 0 29 2 *", "0 0-23/2 * * *"],
)  # fmt: skip
def test_validate_accepts(expr: str) -> None:
    validate(expr, "Europe/Berlin")


@pytest.mark.parametrize("tz", ["UTC", "Etc/UTC", "Etc/GMT-5", "EST5EDT", "Asia/Kolkata", "America/Port-au-Prince"])
def test_validate_accepts_iana_keys(tz: str) -> None:
    validate("0 0 * * *", tz)


# --- misfires --------------------------------------------------------------------------------------


def test_select_misfires() -> None:
    down_since, now = utc("2026-05-01T09:00"), utc("2026-05-01T12:00")
    missed = expand("*/5 * * * *", "Europe/Berlin", down_since, now)
    assert len(missed) == 36
    assert select_misfires(missed, MisfirePolicy.SKIP) == []
    assert select_misfires(missed, MisfirePolicy.LATEST) == [missed[-1]]
    assert missed[-1].fire_at == utc("2026-05-01T11:55")
    assert select_misfires(missed, MisfirePolicy.ALL, cap=10) == missed[-10:]
    assert select_misfires(missed, MisfirePolicy.ALL) == missed
    assert select_misfires(list(reversed(missed)), MisfirePolicy.LATEST) == [missed[-1]]
    assert select_misfires(missed, "latest") == [missed[-1]]  # type: ignore[arg-type]
    for policy in MisfirePolicy:
        assert select_misfires([], policy) == []
    with pytest.raises(ValueError, match="cap"):
        select_misfires(missed, MisfirePolicy.ALL, cap=0)


# --- speed (the bounds the scanner relies on; generous for slow CI machines) -----------------------


def test_expanding_an_hour_of_minutes_is_fast() -> None:
    start = utc("2026-03-29T00:30")
    best = min(
        _seconds(lambda: expand("* * * * *", "Europe/Berlin", start, start + timedelta(hours=1))) for _ in range(5)
    )
    assert best < 0.050


def test_never_firing_expression_is_refused_quickly() -> None:
    def refuse() -> None:
        with pytest.raises(CronError, match="never fires"):
            validate("0 0 */31 * MON#5", "Europe/Berlin")

    assert _seconds(refuse) < 1.0


def _seconds(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


# --- macros, zones from tzdata, bounded searches -------------------------------------------------


@pytest.mark.parametrize(
    ("macro", "fields"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_vixie_macros_fire_as_the_fields_they_stand_for(macro: str, fields: str) -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    end = start + timedelta(days=800)
    validate(macro, "Europe/Berlin")
    assert expand(macro, "Europe/Berlin", start, end) == expand(fields, "Europe/Berlin", start, end)


def test_zones_come_from_the_tzdata_package_not_the_host(tmp_path: Path) -> None:
    import zoneinfo

    import tzdata

    assert cron.zone_source() == f"tzdata {tzdata.IANA_VERSION}"
    # A host whose zone database says Berlin is UTC+14 all year: cron.py does not read it.
    fake = tmp_path / "zoneinfo"
    (fake / "Europe").mkdir(parents=True)
    (fake / "Europe" / "Berlin").write_bytes((files_of_tzdata() / "Pacific" / "Kiritimati").read_bytes())
    zoneinfo.reset_tzpath([str(fake)])
    try:
        assert zoneinfo.ZoneInfo.no_cache("Europe/Berlin").utcoffset(datetime(2026, 1, 1)) == timedelta(hours=14)
        cron._zone.cache_clear()
        cron._compile.cache_clear()
        [occurrence] = expand(
            "0 9 * * *", "Europe/Berlin", datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC)
        )
        assert occurrence.fire_at == datetime(2026, 1, 5, 8, 0, tzinfo=UTC)  # UTC+1, as tzdata says
    finally:
        zoneinfo.reset_tzpath()
        cron._zone.cache_clear()
        cron._compile.cache_clear()
    # A zone added to IANA in 2022 that older hosts lack is there, as tzdata has it.
    assert cron.zone("America/Ciudad_Juarez").key == "America/Ciudad_Juarez"


def files_of_tzdata() -> Path:
    from importlib import resources

    return Path(str(resources.files("tzdata.zoneinfo")))


def test_iter_explain_stops_after_what_was_asked() -> None:
    # A seconds schedule over 7 days: 604,800 fires. Taking 1,001 computes at most about twice that.
    start = datetime(2026, 6, 1, tzinfo=UTC)
    produced = 0
    for produced, _row in enumerate(cron.iter_explain("* * * * * *", "UTC", start, start + timedelta(days=7)), 1):
        if produced == 1001:
            break
    assert produced == 1001


def test_last_fires_costs_what_it_returns_not_the_window() -> None:
    end = datetime(2026, 6, 1, tzinfo=UTC)
    found, computed = cron.last_fires("* * * * * *", "UTC", end - timedelta(days=365), end, 100)
    assert [o.fire_at for o in found] == [end - timedelta(seconds=100 - i) for i in range(100)]
    assert computed <= 200
    yearly, computed = cron.last_fires("0 0 1 1 *", "UTC", end - timedelta(days=3650), end, 3)
    assert [o.fire_at.year for o in yearly] == [2024, 2025, 2026]
    none, _ = cron.last_fires("0 0 1 1 *", "UTC", end - timedelta(days=30), end, 3)
    assert none == []
