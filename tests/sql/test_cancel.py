"""pgsched.cancel(): waiting jobs end at once, running ones get a request, finished ones stay as they are."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    complete,
    enqueue,
    event_kinds,
    events,
    fail,
    heartbeat,
    history,
    job,
    pair,
    promote_due,
    snapshot,
)


@pytest.mark.parametrize("when", ["available", "scheduled"])
def test_a_waiting_job_is_cancelled_at_once_and_never_runs(conn: Conn, now: datetime, when: str) -> None:
    run_at = now if when == "available" else now + timedelta(minutes=5)
    job_id = enqueue(conn, run_at=run_at)
    assert cancel(conn, job_id, now=now) == "cancelled"
    assert job(conn, job_id) is None
    [row] = history(conn, job_id)
    assert (row["state"], row["finished_at"], row["attempt"], row["started_at"]) == ("cancelled", now, 0, None)
    assert event_kinds(conn, job_id) == ["cancelled"]
    assert promote_due(conn, now=now + timedelta(hours=1)) == 0
    assert claim(conn, now=now + timedelta(hours=1)) == []


def test_a_running_job_gets_a_cancel_request(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, worker="w1", now=now)
    assert cancel(conn, job_id, now=now + timedelta(seconds=1)) == "cancel_requested"
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["lease_token"], row["cancel_requested_at"]) == (
        "running",
        got["lease_token"],
        now + timedelta(seconds=1),
    )
    assert heartbeat(conn, [pair(got)]) == {job_id: (True, True)}
    [_, requested] = events(conn, job_id)
    assert (requested["kind"], requested["worker"], requested["token"]) == (
        "cancel_requested",
        "w1",
        got["lease_token"],
    )


def test_a_repeated_request_keeps_the_first_time(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    claim_one(conn, now=now)
    cancel(conn, job_id, now=now)
    assert cancel(conn, job_id, now=now + timedelta(minutes=1)) == "cancel_requested"
    row = job(conn, job_id)
    assert row is not None
    assert row["cancel_requested_at"] == now


def test_the_run_of_a_cancel_requested_job_ends_cancelled(conn: Conn) -> None:
    job_id = enqueue(conn, max_attempts=5)
    got = claim_one(conn)
    cancel(conn, job_id)
    assert fail(conn, *pair(got), "stopped on request") == "cancelled"
    assert history(conn, job_id)[0]["state"] == "cancelled"
    assert cancel(conn, job_id) == "already_cancelled"


@pytest.mark.parametrize("outcome", ["completed", "dead", "cancelled"])
def test_a_finished_job_is_left_as_it_is(conn: Conn, outcome: str) -> None:
    job_id = enqueue(conn, max_attempts=1)
    if outcome == "cancelled":
        cancel(conn, job_id)
    else:
        got = claim_one(conn)
        if outcome == "completed":
            complete(conn, [pair(got)])
        else:
            fail(conn, *pair(got))
    before = snapshot(conn)
    assert cancel(conn, job_id) == f"already_{outcome}"
    assert snapshot(conn) == before


def test_an_unknown_job_is_not_found(conn: Conn) -> None:
    assert cancel(conn, 424242) == "not_found"


def test_a_redriven_job_can_be_cancelled_again(conn: Conn) -> None:
    job_id = enqueue(conn)
    cancel(conn, job_id)
    assert conn.execute("SELECT pgsched.retry(%s) AS r", [job_id]).fetchone() == {"r": "retried"}
    assert cancel(conn, job_id) == "cancelled"
    assert [h["state"] for h in history(conn, job_id)] == ["cancelled", "cancelled"]
    assert claim(conn) == []
