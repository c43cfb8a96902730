"""Misfire and concurrency policies of recurring schedules, decided in the database and recorded.

A `*/5` schedule whose scanner was down for 3 hours missed 36 occurrences; the misfire policy
says how many run late, both when they were never expanded (the returning scanner plans
them) and when they were expanded but nothing promoted them in time (promote_due decides).
The concurrency policy decides what happens to an occurrence that is due while the
previous run is still going. Time moves by p_now only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from pgsched.runtime.scanner import Scanner, ScannerOptions
from tests.scheduling.helpers import (
    Conn,
    add_schedule,
    db_now,
    decisions,
    expand,
    jobs,
    occurrences,
    promote,
    run_ats,
    utc,
)

T0 = utc(2026, 6, 1, 12, 0)
DOWN = timedelta(hours=3)
# The scanner comes back 30 s before the next occurrence: T0, T0+5min, ..., T0+175min were
# missed (36 of them, all later than the 1-minute misfire grace) and T0+180min is not due yet.
BACK = T0 + DOWN - timedelta(seconds=30)
MISSED = [T0 + timedelta(minutes=5 * i) for i in range(36)]

MISFIRE_CASES = [
    pytest.param("skip", 100, 0, id="skip"),
    pytest.param("latest", 100, 1, id="latest"),
    pytest.param("all", 10, 10, id="all-capped"),
    pytest.param("all", 100, 36, id="all-under-cap"),
]


def available(db: Conn, name: str) -> list[datetime]:
    rows = db.execute(
        "SELECT run_at FROM pgsched.jobs WHERE schedule = %s AND state = 'available' ORDER BY run_at", [name]
    ).fetchall()
    return [r["run_at"] for r in rows]


def history(db: Conn, name: str) -> list[dict[str, Any]]:
    return db.execute(
        "SELECT id, run_at, state::text AS state, error FROM pgsched.job_history WHERE schedule = %s ORDER BY run_at",
        [name],
    ).fetchall()


# --- misfires ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "cap", "runs"), MISFIRE_CASES)
def test_occurrences_never_expanded_while_the_scanner_was_down(db: Conn, policy: str, cap: int, runs: int) -> None:
    # Catch-up runs may overlap each other: 'allow' keeps the concurrency policy out of the count.
    add_schedule(db, "tick", "*/5 * * * *", misfire_policy=policy, misfire_cap=cap, concurrency="allow")

    # The last expansion reached T0; the scanner returns 3 hours later and expands from there.
    expand(db, "tick", T0, BACK + timedelta(hours=1), BACK)

    late = [o for o in occurrences(db, "tick") if T0 <= o["fire_at"] < BACK]
    assert [o["fire_at"] for o in late] == MISSED
    fired = [o["fire_at"] for o in late if o["decision"] == "misfire_fired"]
    assert fired == MISSED[len(MISSED) - runs :]
    skipped = [o for o in late if o["decision"] == "skipped_misfire"]
    assert len(skipped) == 36 - runs
    assert all(f"misfire policy {policy}" in o["reason"] for o in late)
    assert all(o["job_id"] is None for o in skipped)
    # Only the chosen ones became jobs; the occurrences still ahead fire normally.
    assert [at for at in run_ats(db, "tick") if T0 <= at < BACK] == fired
    assert all(o["decision"] == "fire" for o in occurrences(db, "tick") if o["fire_at"] >= BACK)

    assert promote(db, BACK) == runs
    assert available(db, "tick") == fired


@pytest.mark.parametrize(("policy", "cap", "runs"), MISFIRE_CASES)
def test_expanded_occurrences_that_nothing_promoted_in_time(db: Conn, policy: str, cap: int, runs: int) -> None:
    add_schedule(db, "tick", "*/5 * * * *", misfire_policy=policy, misfire_cap=cap, concurrency="allow")
    created = expand(db, "tick", T0, T0 + DOWN, T0 - timedelta(minutes=1))
    assert created == 36

    # Nothing ran for 3 hours; the first promotion afterwards applies the misfire policy.
    assert promote(db, BACK) == runs

    assert available(db, "tick") == MISSED[36 - runs :]
    dropped = history(db, "tick")
    assert [h["run_at"] for h in dropped] == MISSED[: 36 - runs]
    assert all(h["state"] == "cancelled" for h in dropped)
    assert all(h["error"].startswith(f"skipped: misfire policy {policy}") for h in dropped)
    # The ones run late say so: decided once, as catch-up runs.
    expected = {"misfire_fired": runs, "skipped_misfire": 36 - runs}
    assert decisions(db, "tick") == {k: n for k, n in expected.items() if n}
    skipped = [o for o in occurrences(db, "tick") if o["decision"] == "skipped_misfire"]
    assert all(o["decided_at"] == BACK and "missed by more than" in o["reason"] for o in skipped)
    assert {o["job_id"] for o in skipped} == {h["id"] for h in dropped}


@pytest.mark.parametrize("policy", ["skip", "latest", "all"])
def test_an_occurrence_late_within_the_grace_is_not_a_misfire(db: Conn, policy: str) -> None:
    add_schedule(db, "tick", "*/5 * * * *", misfire_policy=policy, misfire_grace=timedelta(minutes=2))
    expand(db, "tick", T0, T0 + timedelta(minutes=5), T0 - timedelta(minutes=1))

    assert promote(db, T0 + timedelta(seconds=119)) == 1

    assert available(db, "tick") == [T0]
    assert decisions(db, "tick") == {"fire": 1}


def test_a_scanner_returning_after_its_horizon_runs_the_latest_once(conn: Conn) -> None:
    """Down longer than the horizon: the first hour of missed occurrences had been expanded, the
    rest had not. The returning scanner runs one catch-up in all, not one of each kind."""
    now = db_now(conn)
    start = now - DOWN
    add_schedule(conn, "tick", "*/5 * * * *", misfire_policy="latest", concurrency="allow")
    expand(conn, "tick", start, start + timedelta(hours=1), start, scanner="dead-scanner")

    scanner = Scanner(conn.info.dsn, ScannerOptions(name="back", listen=False, install_signal_handlers=False))
    try:
        scanner.tick()  # takes the shards over, expands what was missed, promotes what is due
    finally:
        scanner._shutdown()

    # The latest missed occurrence runs, and so does an on-time one (due within the grace) if any.
    ran, *on_time = available(conn, "tick")
    assert ran > now - timedelta(minutes=6)  # the latest occurrence missed, not one from the first hour
    assert all(at >= now - timedelta(minutes=1) for at in on_time)
    assert len(on_time) <= 1
    before = [o for o in occurrences(conn, "tick") if o["fire_at"] < ran]
    assert len(before) >= 34  # 3 h of */5 fires before the one that ran, give or take the edges
    assert {o["decision"] for o in before} == {"skipped_misfire"}
    assert [o["decision"] for o in occurrences(conn, "tick") if o["fire_at"] == ran] in (["misfire_fired"], ["fire"])


# --- concurrency: the previous run is still going ---------------------------------------------


def start_first_run(db: Conn, concurrency: str) -> dict[str, Any]:
    """A `*/5` schedule whose T0 run was promoted and claimed, and is still running."""
    add_schedule(db, "tick", "*/5 * * * *", concurrency=concurrency)
    expand(db, "tick", T0, T0 + timedelta(minutes=30), T0 - timedelta(minutes=1))
    assert promote(db, T0) == 1
    [claimed] = db.execute(
        "SELECT id, lease_token FROM pgsched.claim('w1', ARRAY['default'], 1, '1 hour', p_now => %s)", [T0]
    ).fetchall()
    [first] = jobs(db, "tick")[:1]
    assert (claimed["id"], first["state"]) == (first["id"], "running")
    return claimed


def occurrence(db: Conn, fire_at: datetime) -> dict[str, Any]:
    [found] = [o for o in occurrences(db, "tick") if o["fire_at"] == fire_at]
    return found


def state_of(db: Conn, job_id: int) -> str:
    row = db.execute(
        "SELECT state::text AS s FROM pgsched.jobs WHERE id = %(id)s"
        " UNION ALL SELECT state::text FROM pgsched.job_history WHERE id = %(id)s",
        {"id": job_id},
    ).fetchone()
    assert row is not None
    return str(row["s"])


def test_concurrency_allow_runs_alongside(db: Conn) -> None:
    first = start_first_run(db, "allow")

    assert promote(db, T0 + timedelta(minutes=5)) == 1

    assert state_of(db, first["id"]) == "running"
    assert available(db, "tick") == [T0 + timedelta(minutes=5)]
    assert occurrence(db, T0 + timedelta(minutes=5))["decision"] == "fire"


def test_concurrency_skip_cancels_the_new_occurrence(db: Conn) -> None:
    first = start_first_run(db, "skip")
    second = T0 + timedelta(minutes=5)

    assert promote(db, second) == 0

    assert state_of(db, first["id"]) == "running"
    [filed] = history(db, "tick")
    assert (filed["run_at"], filed["state"]) == (second, "cancelled")
    assert filed["error"] == "skipped: the previous run of this schedule was still going"
    occ = occurrence(db, second)
    assert (occ["decision"], occ["job_id"], occ["decided_at"]) == ("skipped_overlap", filed["id"], second)
    assert occ["reason"] == "concurrency policy skip: previous run still going"

    # Once the previous run finished, the next occurrence runs.
    db.execute(
        "SELECT * FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], p_now => %s)",
        [first["id"], first["lease_token"], second],
    )
    assert promote(db, T0 + timedelta(minutes=10)) == 1
    assert available(db, "tick") == [T0 + timedelta(minutes=10)]


def test_concurrency_queue_keeps_one_waiting_and_skips_the_rest(db: Conn) -> None:
    first = start_first_run(db, "queue")
    second, third = T0 + timedelta(minutes=5), T0 + timedelta(minutes=10)

    # A scanner looks at least every second while something is due; every 30 s is enough here.
    now = second
    while now <= third:
        assert promote(db, now) == 0
        now += timedelta(seconds=30)

    waiting = db.execute(
        "SELECT id, run_at FROM pgsched.jobs WHERE schedule = 'tick' AND state = 'scheduled' AND run_at <= %s",
        [third + timedelta(seconds=1)],
    ).fetchall()
    assert len(waiting) == 1  # at most one occurrence pending
    queued = occurrence(db, second)
    assert (queued["decision"], queued["job_id"]) == ("queued", waiting[0]["id"])
    assert queued["decided_at"] == second  # the first decision is kept while it waits
    assert queued["reason"] == "concurrency policy queue: waiting for the previous run"
    [filed] = history(db, "tick")
    assert (filed["run_at"], filed["state"]) == (third, "cancelled")
    assert filed["error"] == "skipped: one occurrence of this schedule is already queued"
    skipped = occurrence(db, third)
    assert (skipped["decision"], skipped["job_id"]) == ("skipped_overlap", filed["id"])
    assert skipped["reason"] == "concurrency policy queue: another occurrence is already waiting"

    # The previous run ends: the queued occurrence starts at the next look.
    db.execute(
        "SELECT * FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], p_now => %s)",
        [first["id"], first["lease_token"], third],
    )
    assert promote(db, now) == 1
    assert state_of(db, waiting[0]["id"]) == "available"


def test_concurrency_replace_cancels_the_previous_run(db: Conn) -> None:
    first = start_first_run(db, "replace")
    second = T0 + timedelta(minutes=5)

    assert promote(db, second) == 1

    assert available(db, "tick") == [second]
    occ = occurrence(db, second)
    assert (occ["decision"], occ["decided_at"]) == ("replaced_previous", second)
    assert occ["reason"] == "concurrency policy replace: previous run cancelled"
    # The running one was asked to stop; its worker sees it at the next heartbeat ...
    [beat] = db.execute(
        "SELECT * FROM pgsched.heartbeat(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], '1 hour', p_now => %s)",
        [first["id"], first["lease_token"], second],
    ).fetchall()
    assert (beat["held"], beat["cancel_requested"]) == (True, True)
    # ... and its run ends as cancelled, filed in the history.
    db.execute(
        "SELECT pgsched.fail(%s, %s, 'cancelled: replaced by the next occurrence', p_now => %s)",
        [first["id"], first["lease_token"], second],
    )
    [filed] = history(db, "tick")
    assert (filed["id"], filed["state"]) == (first["id"], "cancelled")


def test_concurrency_replace_cancels_a_previous_run_that_had_not_started(db: Conn) -> None:
    add_schedule(db, "tick", "*/5 * * * *", concurrency="replace")
    expand(db, "tick", T0, T0 + timedelta(minutes=30), T0 - timedelta(minutes=1))
    assert promote(db, T0) == 1  # promoted, never claimed

    assert promote(db, T0 + timedelta(minutes=5)) == 1

    assert available(db, "tick") == [T0 + timedelta(minutes=5)]
    [filed] = history(db, "tick")
    assert (filed["run_at"], filed["state"]) == (T0, "cancelled")
    assert filed["error"].startswith("replaced by the occurrence due at 2026-06-01 ")
    assert filed["error"].endswith("(concurrency policy replace)")
    assert occurrence(db, T0 + timedelta(minutes=5))["decision"] == "replaced_previous"
