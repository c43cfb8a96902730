"""Catch-up follows the written policy (docs/schedules.md).

Misfire and concurrency combine: every missed occurrence the misfire policy keeps runs, one
after another where the concurrency policy allows no overlap, and catch-up never cancels the
on-time occurrence. The policy applies to the whole missed window, however long the outage, and
a pass computes a bounded number of occurrences. A waiting occurrence keeps its fire time
(ctx.scheduled_at). Time moves by p_now only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from pgsched.runtime import expansion
from tests.scheduling.helpers import Conn, add_schedule, decisions, expand, occurrences, promote, schedule, utc

T0 = utc(2026, 6, 1, 12, 0)
DOWN = timedelta(hours=3)
BACK = T0 + DOWN - timedelta(seconds=30)
MISSED = [T0 + timedelta(minutes=5 * i) for i in range(36)]
ON_TIME = T0 + DOWN  # due 30 s after the return


def claim(db: Conn, now: datetime) -> list[dict[str, Any]]:
    return db.execute(
        "SELECT id, run_at, lease_token FROM pgsched.claim('w1', ARRAY['default'], 10, '1 hour', p_now => %s)", [now]
    ).fetchall()


def complete(db: Conn, job: dict[str, Any], now: datetime) -> None:
    """Finish a claimed run at the test's clock (a lease is checked against the clock the call is given)."""
    db.execute(
        "SELECT * FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], p_now => %s)",
        [job["id"], job["lease_token"], now],
    )


def run_one_at_a_time(db: Conn, start: datetime, want: int, step: timedelta = timedelta(seconds=5)) -> list[datetime]:
    """Promote, claim and finish every `step` from `start` until `want` runs finished; never two at once."""
    ran: list[datetime] = []
    now = start
    for _ in range(10 * want):
        promote(db, now)
        active = db.execute(
            "SELECT count(*) AS n FROM pgsched.jobs WHERE schedule = 'tick' AND state IN ('available', 'running')"
        ).fetchone()
        assert active is not None
        assert active["n"] <= 1, f"two runs of one schedule at {now}"
        for job in claim(db, now):
            ran.append(job["run_at"])
            complete(db, job, now)
        if len(ran) >= want:
            return ran
        now += step
    pytest.fail(f"only {len(ran)} of {want} runs")


@pytest.mark.parametrize("concurrency", ["skip", "queue", "replace"])
@pytest.mark.parametrize("expanded", [False, True], ids=["never-expanded", "expanded-not-promoted"])
def test_misfire_all_runs_every_missed_occurrence_one_after_another(db: Conn, concurrency: str, expanded: bool) -> None:
    add_schedule(db, "tick", "*/5 * * * *", misfire_policy="all", misfire_cap=100, concurrency=concurrency)
    if expanded:  # filed before the outage, then nothing promoted them
        expand(db, "tick", T0, T0 + DOWN + timedelta(hours=1), T0 - timedelta(minutes=1))
    else:  # the outage began before they were expanded
        expand(db, "tick", T0, BACK + timedelta(hours=1), BACK)

    # 36 catch-up runs of 5 s each: the on-time occurrence comes due during them and waits its turn.
    ran = run_one_at_a_time(db, BACK, want=37)

    assert ran == [*MISSED, ON_TIME]
    assert "skipped_overlap" not in decisions(db, "tick")
    assert "skipped_misfire" not in decisions(db, "tick")
    on_time = [o for o in occurrences(db, "tick") if o["fire_at"] == ON_TIME]
    assert on_time[0]["decision"] in ("queued", "fire")


@pytest.mark.parametrize("concurrency", ["skip", "queue"])
def test_misfire_latest_runs_the_latest_missed_then_the_on_time_one(db: Conn, concurrency: str) -> None:
    add_schedule(db, "tick", "*/5 * * * *", misfire_policy="latest", concurrency=concurrency)
    expand(db, "tick", T0, BACK + timedelta(hours=1), BACK)

    # Each catch-up run takes 40 s: the on-time one (due 30 s after the return) waits, then runs.
    ran = run_one_at_a_time(db, BACK, want=2, step=timedelta(seconds=40))

    assert ran == [MISSED[-1], ON_TIME]
    assert decisions(db, "tick")["skipped_misfire"] == 35
    assert "skipped_overlap" not in decisions(db, "tick")


def test_a_waiting_occurrence_keeps_its_fire_time(db: Conn) -> None:
    """Under concurrency 'queue' the waiting occurrence is claimed with run_at = its fire time
    (what ctx.scheduled_at reports), not the time it was last looked at."""
    add_schedule(db, "tick", "*/5 * * * *", concurrency="queue")
    expand(db, "tick", T0, T0 + timedelta(minutes=30), T0 - timedelta(minutes=1))
    promote(db, T0)
    [first] = claim(db, T0)
    second = T0 + timedelta(minutes=5)
    for seconds in (0, 1, 30, 90):
        assert promote(db, second + timedelta(seconds=seconds)) == 0
    waiting = db.execute(
        "SELECT run_at FROM pgsched.jobs WHERE schedule = 'tick' AND state = 'scheduled' AND run_at <= %s",
        [second + timedelta(minutes=2)],
    ).fetchall()
    assert [w["run_at"] for w in waiting] == [second]

    complete(db, first, second + timedelta(minutes=2))
    assert promote(db, second + timedelta(minutes=2)) == 1
    [job] = claim(db, second + timedelta(minutes=2))
    assert job["run_at"] == second


# --- the whole missed window ---------------------------------------------------------------------

LONG = timedelta(minutes=2000)  # 2,000 missed fires of a minutely schedule: more than one pass holds


@pytest.mark.parametrize(("policy", "cap", "runs"), [("latest", 100, 1), ("all", 100, 100), ("skip", 100, 0)])
def test_an_outage_longer_than_one_pass_applies_the_policy_to_the_whole_window(
    db: Conn, policy: str, cap: int, runs: int
) -> None:
    add_schedule(db, "tick", "* * * * *", misfire_policy=policy, misfire_cap=cap, concurrency="allow")
    back = T0 + LONG - timedelta(seconds=30)  # T0 .. T0+1998min missed; T0+1999min late within the grace
    expand(db, "tick", T0, back + timedelta(hours=1), back)

    fired = [o["fire_at"] for o in occurrences(db, "tick") if o["decision"] == "misfire_fired"]
    last_missed = T0 + timedelta(minutes=1998)
    assert fired == [last_missed - timedelta(minutes=runs - 1 - i) for i in range(runs)]
    summary = [o for o in occurrences(db, "tick") if o["decision"] == "skipped_misfire"]
    assert len(summary) == 1
    assert summary[0]["fire_at"] == T0
    assert f"misfire policy {policy}" in summary[0]["reason"]

    # What runs: the kept missed ones and the on-time one, nothing else.
    promote(db, back)
    due = db.execute(
        "SELECT run_at FROM pgsched.jobs WHERE schedule = 'tick' AND state = 'available' ORDER BY run_at"
    ).fetchall()
    assert [d["run_at"] for d in due] == [*fired, T0 + timedelta(minutes=1999)]


def test_a_pass_over_a_seconds_schedule_is_bounded(db: Conn) -> None:
    add_schedule(db, "tick", "* * * * * *", horizon=timedelta(days=7), misfire_policy="all", misfire_cap=100)
    row = schedule(db, "tick")
    now = T0
    # Ahead: 604,800 fires in the horizon; one pass computes about a thousand and stops there.
    ahead = expansion.plan(row, now, now + timedelta(days=7), now)
    assert ahead.until == now + timedelta(seconds=expansion.MAX_FIRES_PER_EXPANSION)
    assert len(ahead.decisions) == expansion.MAX_FIRES_PER_EXPANSION
    assert ahead.computed <= 2 * expansion.MAX_FIRES_PER_EXPANSION + 60
    # After a 30-day outage (2.6 million missed fires) too.
    late = expansion.plan(row, now - timedelta(days=30), now + timedelta(days=7), now)
    assert [d["decision"] for d in late.decisions].count("misfire_fired") == 100
    assert late.computed <= 5 * expansion.MAX_FIRES_PER_EXPANSION


def test_missed_occurrences_wait_for_the_rest_of_the_missed_window(db: Conn) -> None:
    """Expanded for the first hour, then nothing ran for three: promotion leaves the first hour's
    missed occurrences undecided until the rest is expanded, then 'latest' keeps one in all."""
    add_schedule(db, "tick", "*/5 * * * *", misfire_policy="latest", concurrency="allow")
    expand(db, "tick", T0, T0 + timedelta(hours=1), T0 - timedelta(minutes=1))

    assert promote(db, BACK) == 0
    assert decisions(db, "tick") == {"fire": 12}

    expand(db, "tick", T0 + timedelta(hours=1), BACK + timedelta(hours=1), BACK)
    assert promote(db, BACK) == 1
    assert [o["fire_at"] for o in occurrences(db, "tick") if o["decision"] == "misfire_fired"] == [MISSED[-1]]
    assert decisions(db, "tick")["skipped_misfire"] == 35


def test_a_paused_schedules_missed_occurrences_are_decided_not_left_waiting(db: Conn) -> None:
    add_schedule(db, "tick", "*/5 * * * *", misfire_policy="latest", concurrency="allow")
    expand(db, "tick", T0, T0 + timedelta(hours=1), T0 - timedelta(minutes=1))
    db.execute("SELECT pgsched.pause_schedule('tick')")

    promote(db, T0 + timedelta(minutes=32))
    left = db.execute(
        "SELECT count(*) AS n FROM pgsched.jobs WHERE schedule = 'tick' AND state = 'scheduled' AND run_at <= %s",
        [T0 + timedelta(minutes=32)],
    ).fetchone()
    assert left == {"n": 0}
