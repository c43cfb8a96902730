"""Schedules across the 2026 DST changes of Europe/Berlin and America/New_York, through the database.

Each case expands a schedule over whole local days with the scanner's planner and
pgsched.add_occurrences, then reads back the jobs (run_at, idempotency key) and the
occurrences table (decision, dst, reason) a user would inspect with psql.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.scheduling.helpers import (
    Conn,
    acquire,
    add_schedule,
    decisions,
    expand,
    jobs,
    key,
    occurrences,
    run_ats,
    schedule,
    utc,
)

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def local_days(tz: str, year: int, month: int, day: int, days: int = 1) -> tuple[datetime, datetime]:
    """[local midnight of the date, local midnight `days` later) as aware datetimes."""
    zone = ZoneInfo(tz)
    start = datetime(year, month, day, tzinfo=zone)
    end = datetime.combine(start.date() + timedelta(days=days), datetime.min.time(), tzinfo=zone)
    return start, end


def every(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    """Every instant start, start + step, ... before end, in UTC."""
    found, moment = [], start.astimezone(UTC)
    while moment < end:
        found.append(moment)
        moment += step
    return found


# --- fixed-time schedules: the gap and overlap policies decide ---------------------------------

FIXED_CASES = [
    # zone, cron, first local day (3 days expanded), gap, overlap, expected UTC fire instants
    pytest.param(
        BERLIN,
        "30 2 * * *",
        (2026, 3, 28),
        "run",
        "once",
        [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)],
        id="berlin-spring-gap-run",
    ),
    pytest.param(
        BERLIN,
        "30 2 * * *",
        (2026, 3, 28),
        "skip",
        "once",
        [utc(2026, 3, 28, 1, 30), utc(2026, 3, 30, 0, 30)],
        id="berlin-spring-gap-skip",
    ),
    pytest.param(
        BERLIN,
        "30 2 * * *",
        (2026, 10, 24),
        "run",
        "once",
        [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)],
        id="berlin-fall-overlap-once",
    ),
    pytest.param(
        BERLIN,
        "30 2 * * *",
        (2026, 10, 24),
        "run",
        "twice",
        [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30), utc(2026, 10, 26, 1, 30)],
        id="berlin-fall-overlap-twice",
    ),
    pytest.param(
        NEW_YORK,
        "30 2 * * *",
        (2026, 3, 7),
        "run",
        "once",
        [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)],
        id="new-york-spring-gap-run",
    ),
    pytest.param(
        NEW_YORK,
        "30 2 * * *",
        (2026, 3, 7),
        "skip",
        "twice",
        [utc(2026, 3, 7, 7, 30), utc(2026, 3, 9, 6, 30)],
        id="new-york-spring-gap-skip",
    ),
    pytest.param(
        NEW_YORK,
        "30 1 * * *",
        (2026, 10, 31),
        "skip",
        "once",
        [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)],
        id="new-york-fall-overlap-once",
    ),
    pytest.param(
        NEW_YORK,
        "30 1 * * *",
        (2026, 10, 31),
        "run",
        "twice",
        [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 6, 30)],
        id="new-york-fall-overlap-twice",
    ),
    pytest.param(
        NEW_YORK,
        "30 2 * * *",
        (2026, 10, 31),
        "run",
        "twice",
        [utc(2026, 10, 31, 6, 30), utc(2026, 11, 1, 7, 30), utc(2026, 11, 2, 7, 30)],
        id="new-york-fall-after-the-repeated-hour",
    ),
]


@pytest.mark.parametrize(("tz", "cron", "day", "gap", "overlap", "expected"), FIXED_CASES)
def test_fixed_time_schedule_fires_where_its_policies_say(
    db: Conn, tz: str, cron: str, day: tuple[int, int, int], gap: str, overlap: str, expected: list[datetime]
) -> None:
    start, end = local_days(tz, *day, days=3)
    add_schedule(db, "nightly", cron, tz, gap_policy=gap, overlap_policy=overlap)

    created = expand(db, "nightly", start, end)

    assert created == len(expected)
    found = jobs(db, "nightly")
    assert [j["run_at"] for j in found] == expected
    assert all(j["state"] == "scheduled" for j in found)
    assert [j["idempotency_key"] for j in found] == [key("nightly", at) for at in expected]
    # Every occurrence that fires is recorded as fired, pointing at its job.
    fired = [o for o in occurrences(db, "nightly") if o["decision"] == "fire"]
    assert [o["fire_at"] for o in fired] == expected
    assert [o["job_id"] for o in fired] == [j["id"] for j in found]


def test_berlin_spring_gap_run_is_recorded_as_shifted(db: Conn) -> None:
    start, end = local_days(BERLIN, 2026, 3, 29)
    add_schedule(db, "nightly", "30 2 * * *", BERLIN)

    assert expand(db, "nightly", start, end) == 1

    [occ] = occurrences(db, "nightly")
    assert occ["fire_at"] == utc(2026, 3, 29, 1, 0)  # 03:00 CEST, the first instant after the gap
    assert occ["decision"] == "fire"
    assert occ["dst"] == "gap_shifted"
    assert occ["nominal"] == "2026-03-29T02:30"
    assert "does not exist" in occ["reason"]
    assert "gap policy run" in occ["reason"]
    assert "03:00:00+02:00" in occ["reason"]


def test_berlin_spring_gap_skip_is_recorded_without_a_job(db: Conn) -> None:
    start, end = local_days(BERLIN, 2026, 3, 29)
    add_schedule(db, "nightly", "30 2 * * *", BERLIN, gap_policy="skip")

    assert expand(db, "nightly", start, end) == 0

    assert jobs(db, "nightly") == []
    [occ] = occurrences(db, "nightly")
    assert occ["fire_at"] == utc(2026, 3, 29, 1, 0)
    assert (occ["decision"], occ["dst"], occ["job_id"]) == ("skipped_gap", "gap_shifted", None)
    assert "gap policy skip" in occ["reason"]


@pytest.mark.parametrize(
    ("tz", "cron", "day", "first", "second"),
    [
        pytest.param(
            BERLIN, "30 2 * * *", (2026, 10, 25), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30), id="berlin"
        ),
        pytest.param(
            NEW_YORK, "30 1 * * *", (2026, 11, 1), utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30), id="new-york"
        ),
    ],
)
@pytest.mark.parametrize("overlap", ["once", "twice"])
def test_fall_back_overlap_is_recorded_on_both_passes(
    db: Conn, tz: str, cron: str, day: tuple[int, int, int], first: datetime, second: datetime, overlap: str
) -> None:
    start, end = local_days(tz, *day)
    add_schedule(db, "nightly", cron, tz, overlap_policy=overlap)

    expand(db, "nightly", start, end)

    found = occurrences(db, "nightly")
    assert [o["fire_at"] for o in found] == [first, second]
    assert [o["dst"] for o in found] == ["overlap_first", "overlap_second"]
    assert len({o["nominal"] for o in found}) == 1  # the same wall-clock time, twice
    assert found[0]["decision"] == "fire"
    assert "first pass" in found[0]["reason"]
    if overlap == "once":
        assert found[1]["decision"] == "skipped_dst_overlap"
        assert found[1]["job_id"] is None
        assert "overlap policy once" in found[1]["reason"]
        assert run_ats(db, "nightly") == [first]
    else:
        assert found[1]["decision"] == "fire"
        assert "second pass" in found[1]["reason"]
        assert run_ats(db, "nightly") == [first, second]


# --- elapsed-time schedules: a missing hour is absent, a repeated hour fires twice -----------

ELAPSED_CASES = [
    pytest.param(BERLIN, "0 * * * *", (2026, 3, 29), timedelta(hours=1), 23, id="berlin-hourly-spring"),
    pytest.param(BERLIN, "0 * * * *", (2026, 10, 25), timedelta(hours=1), 25, id="berlin-hourly-fall"),
    pytest.param(BERLIN, "*/15 * * * *", (2026, 3, 29), timedelta(minutes=15), 92, id="berlin-15min-spring"),
    pytest.param(BERLIN, "*/15 * * * *", (2026, 10, 25), timedelta(minutes=15), 100, id="berlin-15min-fall"),
    pytest.param(NEW_YORK, "0 * * * *", (2026, 3, 8), timedelta(hours=1), 23, id="new-york-hourly-spring"),
    pytest.param(NEW_YORK, "0 * * * *", (2026, 11, 1), timedelta(hours=1), 25, id="new-york-hourly-fall"),
    pytest.param(NEW_YORK, "*/15 * * * *", (2026, 3, 8), timedelta(minutes=15), 92, id="new-york-15min-spring"),
    pytest.param(NEW_YORK, "*/15 * * * *", (2026, 11, 1), timedelta(minutes=15), 100, id="new-york-15min-fall"),
]


@pytest.mark.parametrize(("tz", "cron", "day", "step", "count"), ELAPSED_CASES)
def test_elapsed_time_schedule_follows_the_clock_under_every_policy(
    db: Conn, tz: str, cron: str, day: tuple[int, int, int], step: timedelta, count: int
) -> None:
    start, end = local_days(tz, *day)
    expected = every(start, end, step)
    assert len(expected) == count
    # The DST policies name wall-clock times; they must not change an elapsed-time schedule.
    policies = [("run", "once"), ("skip", "once"), ("run", "twice"), ("skip", "twice")]
    for gap, overlap in policies:
        name = f"every-{gap}-{overlap}"
        add_schedule(db, name, cron, tz, gap_policy=gap, overlap_policy=overlap)

        assert expand(db, name, start, end) == count

        found = jobs(db, name)
        assert [j["run_at"] for j in found] == expected, (gap, overlap)
        assert len({j["idempotency_key"] for j in found}) == count
        assert decisions(db, name) == {"fire": count}
        assert {o["dst"] for o in occurrences(db, name)} == {None}


# --- the window is the same however a scanner cuts it ------------------------------------------


@pytest.mark.parametrize(
    ("tz", "cron", "day", "cut"),
    [
        pytest.param(BERLIN, "*/15 * * * *", (2026, 10, 25), utc(2026, 10, 25, 0, 40), id="berlin-15min"),
        pytest.param(BERLIN, "30 2 * * *", (2026, 10, 25), utc(2026, 10, 25, 0, 45), id="berlin-nightly"),
        pytest.param(NEW_YORK, "30 1 * * *", (2026, 11, 1), utc(2026, 11, 1, 6, 10), id="new-york-nightly"),
        pytest.param(NEW_YORK, "30 2 * * *", (2026, 3, 8), utc(2026, 3, 8, 6, 59), id="new-york-gap"),
    ],
)
def test_a_scanner_restarted_inside_the_transition_adds_nothing_twice(
    db: Conn, tz: str, cron: str, day: tuple[int, int, int], cut: datetime
) -> None:
    start, end = local_days(tz, *day)
    for name in ("whole", "cut"):
        add_schedule(db, name, cron, tz, overlap_policy="twice")
    expand(db, "whole", start, end, scanner="scanner-a")

    # Scanner A expands up to the cut and dies; B takes the shard over after the lease lapsed
    # and continues from the expanded_until that A left, re-covering part of A's window.
    expand(db, "cut", start, cut, scanner="scanner-a")
    resumed = schedule(db, "cut")["expanded_until"]
    assert resumed == cut
    expand(db, "cut", resumed - timedelta(minutes=30), end, cut, scanner="scanner-b")

    assert run_ats(db, "cut") == run_ats(db, "whole")
    assert [(o["fire_at"], o["decision"], o["dst"]) for o in occurrences(db, "cut")] == [
        (o["fire_at"], o["decision"], o["dst"]) for o in occurrences(db, "whole")
    ]


def test_changing_the_gap_policy_re_decides_the_occurrence(db: Conn) -> None:
    start, end = local_days(BERLIN, 2026, 3, 29)
    row = add_schedule(db, "nightly", "30 2 * * *", BERLIN, gap_policy="skip")
    now = start - timedelta(days=1)
    epochs = acquire(db, now)
    expand(db, "nightly", start, end, now, epochs=epochs)
    assert [o["decision"] for o in occurrences(db, "nightly")] == ["skipped_gap"]

    edited = add_schedule(db, "nightly", "30 2 * * *", BERLIN, gap_policy="run")
    assert edited["version"] == row["version"] + 1
    expand(db, "nightly", start, end, now, epochs=epochs)

    [job] = jobs(db, "nightly")
    assert job["run_at"] == utc(2026, 3, 29, 1, 0)
    [occ] = occurrences(db, "nightly")
    assert (occ["decision"], occ["job_id"], occ["version"]) == ("fire", job["id"], edited["version"])

    # And back: the job is withdrawn and the occurrence says it is skipped again.
    add_schedule(db, "nightly", "30 2 * * *", BERLIN, gap_policy="skip")
    expand(db, "nightly", start, end, now, epochs=epochs)
    assert run_ats(db, "nightly") == []
    [occ] = occurrences(db, "nightly")
    assert (occ["decision"], occ["job_id"]) == ("skipped_gap", None)
