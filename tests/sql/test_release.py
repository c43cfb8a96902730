"""pgsched.release(): a stopping worker hands its running jobs back at once, fenced by token."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    enqueue,
    enqueue_many,
    event_kinds,
    expire_leases,
    history,
    job,
    pair,
    release,
    snapshot,
)


def test_released_jobs_are_claimable_at_once(conn: Conn, now: datetime) -> None:
    ids = enqueue_many(conn, ["t"] * 3, max_attempts=[1, 1, 1])
    got = claim(conn, 3, worker="w1", now=now)
    rows = release(conn, [pair(g) for g in reversed(got)], now=now)
    assert rows == [{"job_id": i, "outcome": "available"} for i in sorted(ids)]  # in id order
    for job_id in ids:
        row = job(conn, job_id)
        assert row is not None
        assert (row["state"], row["attempt"], row["max_attempts"], row["lease_token"]) == ("available", 1, 2, None)
        assert event_kinds(conn, job_id) == ["claimed", "released"]
    again = claim(conn, 3, worker="w2", now=now)
    assert {g["id"] for g in again} == set(ids)
    assert all(g["attempt"] == 2 for g in again)


def test_a_stale_token_is_reported_and_the_rest_released(conn: Conn, now: datetime) -> None:
    enqueue_many(conn, ["t"] * 2)
    kept, lost = claim(conn, 2, worker="w1", now=now)
    later = now + timedelta(minutes=1)
    conn.execute("SELECT pgsched.heartbeat(%s, %s, '1 hour', NULL, %s)", [[kept["id"]], [kept["lease_token"]], now])
    expire_leases(conn, now=later)
    taken = claim_one(conn, worker="w2", now=later)
    assert taken["id"] == lost["id"]
    lost_row = job(conn, lost["id"])
    rows = release(conn, [pair(kept), pair(lost)], now=later)
    assert {r["job_id"]: r["outcome"] for r in rows} == {kept["id"]: "available", lost["id"]: "lease_lost"}
    assert job(conn, lost["id"]) == lost_row


def test_a_released_job_with_a_cancel_request_is_cancelled(conn: Conn) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn)
    cancel(conn, job_id)
    assert release(conn, [pair(got)]) == [{"job_id": job_id, "outcome": "cancelled"}]
    assert history(conn, job_id)[0]["state"] == "cancelled"


def test_releasing_a_finished_job_changes_nothing(conn: Conn) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn)
    conn.execute("SELECT pgsched.complete(%s, %s)", [[job_id], [got["lease_token"]]])
    before = snapshot(conn)
    assert release(conn, [pair(got)]) == [{"job_id": job_id, "outcome": "lease_lost"}]
    assert snapshot(conn) == before
