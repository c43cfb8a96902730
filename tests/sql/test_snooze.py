"""pgsched.snooze(): puts a running job back for later without spending a failed attempt."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    enqueue,
    event_kinds,
    expire_leases,
    fail,
    history,
    job,
    pair,
    promote_due,
    snapshot,
    snooze,
)


def test_snooze_schedules_the_job_for_later(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=3)
    got = claim_one(conn, now=now)
    at = now + timedelta(minutes=10)
    assert snooze(conn, *pair(got), at, now=now) == "scheduled"
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["run_at"], row["attempt"], row["max_attempts"]) == ("scheduled", at, 1, 4)
    assert row["lease_token"] is None
    assert row["leased_by"] is None
    assert event_kinds(conn, job_id) == ["claimed", "snoozed"]
    assert promote_due(conn, now=at - timedelta(seconds=1)) == 0
    assert promote_due(conn, now=at) == 1
    again = claim_one(conn, now=at)
    assert again["attempt"] == 2
    assert again["lease_token"] > got["lease_token"]


def test_snooze_to_now_is_available_at_once(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    assert snooze(conn, *pair(claim_one(conn, now=now)), now, now=now) == "available"
    assert claim_one(conn, now=now)["id"] == job_id


def test_snoozes_do_not_spend_the_failure_budget(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=2)
    at = now
    for _ in range(5):
        assert snooze(conn, *pair(claim_one(conn, now=at)), at, now=at) == "available"
    assert fail(conn, *pair(claim_one(conn, now=at)), retry_at=at, now=at) == "available"
    got = claim_one(conn, now=at)
    assert got["attempt"] == 7
    assert fail(conn, *pair(got), "second failure", now=at) == "dead"
    assert history(conn, job_id)[0]["error"] == "second failure"


def test_a_cancel_requested_job_is_cancelled_instead(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    cancel(conn, job_id)
    assert snooze(conn, *pair(got), now + timedelta(hours=1), now=now) == "cancelled"
    assert job(conn, job_id) is None
    assert history(conn, job_id)[0]["state"] == "cancelled"


def test_a_stale_token_changes_nothing(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    old = claim_one(conn, worker="w1", now=now)
    later = now + timedelta(minutes=1)
    expire_leases(conn, now=later)
    claim_one(conn, worker="w2", now=later)
    before = snapshot(conn)
    assert snooze(conn, *pair(old), later + timedelta(hours=1), now=later) == "lease_lost"
    assert snapshot(conn) == before
    assert job(conn, job_id) is not None
