"""pgsched.expire_leases(): work of dead or stalled workers comes back, fenced against newer owners."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import psycopg
from psycopg.rows import dict_row

from tests.sql.conftest import Listener
from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    complete,
    enqueue,
    enqueue_many,
    events,
    expire_leases,
    history,
    job,
    pair,
    scalar,
    snapshot,
)

LEASE = timedelta(seconds=30)


def test_an_expired_lease_returns_the_job(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=3)
    got = claim_one(conn, worker="w1", now=now)
    at = now + LEASE + timedelta(seconds=1)
    assert expire_leases(conn, now=at) == 1
    row = job(conn, job_id)
    assert row is not None
    assert row["state"] == "available"
    assert row["attempt"] == 1
    assert row["run_at"] == got["run_at"]  # kept: it runs before newer work
    assert (row["lease_token"], row["leased_by"], row["lease_expires_at"]) == (None, None, None)
    assert "w1" in row["last_error"]
    expired = events(conn, job_id)[-1]
    assert (expired["kind"], expired["worker"], expired["token"], expired["attempt"], expired["at"]) == (
        "lease_expired",
        "w1",
        got["lease_token"],
        1,
        at,
    )
    assert expired["detail"]["outcome"] == "available"


def test_the_next_claim_gets_a_larger_token(conn: Conn, now: datetime) -> None:
    enqueue(conn)
    first = claim_one(conn, worker="w1", now=now)
    enqueue(conn)
    claim_one(conn, worker="w3", now=now)  # another token drawn in between
    at = now + timedelta(minutes=1)
    expire_leases(conn, now=at)
    second = claim(conn, 10, worker="w2", now=at)
    again = next(r for r in second if r["id"] == first["id"])
    assert again["lease_token"] > first["lease_token"]
    assert again["attempt"] == 2


def test_a_lease_that_has_not_run_out_is_kept(conn: Conn, now: datetime) -> None:
    enqueue(conn)
    claim_one(conn, now=now)
    before = snapshot(conn)
    assert expire_leases(conn, now=now + LEASE) == 0  # expires_at is not yet < now
    assert snapshot(conn) == before


def test_a_job_out_of_attempts_goes_dead(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "send", {"to": 1}, max_attempts=1)
    got = claim_one(conn, worker="w1", now=now)
    at = now + timedelta(minutes=1)
    assert expire_leases(conn, now=at) == 1
    assert job(conn, job_id) is None
    [dead] = history(conn, job_id)
    assert (dead["state"], dead["attempt"], dead["finished_at"], dead["leased_by"]) == ("dead", 1, at, "w1")
    assert "lease expired" in dead["error"]
    assert "w1" in dead["error"]
    _, expired, died = events(conn, job_id)
    assert (expired["kind"], expired["worker"], expired["token"], expired["detail"]["outcome"]) == (
        "lease_expired",
        "w1",
        got["lease_token"],
        "dead",
    )
    assert (died["kind"], died["worker"], died["token"]) == ("dead", "w1", got["lease_token"])
    assert conn.execute("SELECT id FROM pgsched.dead_letters").fetchall() == [{"id": job_id}]


def test_a_cancel_requested_job_whose_lease_ran_out_is_cancelled(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=5)
    claim_one(conn, now=now)
    cancel(conn, job_id, now=now)
    assert expire_leases(conn, now=now + timedelta(minutes=1)) == 1
    assert [h["state"] for h in history(conn, job_id)] == ["cancelled"]
    assert [e["kind"] for e in events(conn, job_id)] == ["claimed", "cancel_requested", "lease_expired", "cancelled"]
    assert claim(conn, now=now + timedelta(minutes=1)) == []


def test_a_completion_that_came_first_is_not_overwritten(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    complete(conn, [pair(got)], now=now + timedelta(seconds=29))  # in its lease, before any expiry ran
    assert expire_leases(conn, now=now + timedelta(minutes=5)) == 0
    assert [h["state"] for h in history(conn, job_id)] == ["completed"]


def test_a_completion_in_flight_is_skipped_not_overwritten(dsn: str, conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    at = now + timedelta(minutes=1)
    with psycopg.connect(dsn, row_factory=dict_row) as worker:
        worker.execute("SELECT * FROM pgsched.complete(%s, %s)", [[job_id], [got["lease_token"]]])
        # the completion holds the row; expiry must neither wait for it nor touch it
        conn.execute("SET lock_timeout = '2s'")
        assert expire_leases(conn, now=at) == 0
        worker.commit()
    assert expire_leases(conn, now=at) == 0
    assert [h["state"] for h in history(conn, job_id)] == ["completed"]


def wait_for_a_lock_wait(conn: Conn, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waiting = scalar(
            conn,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        if waiting:
            return
        time.sleep(0.02)
    raise AssertionError("no session started waiting for a lock")


def test_a_completion_racing_a_committed_expiry_is_refused(dsn: str, conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    accepted: list[bool] = []
    with psycopg.connect(dsn) as expirer:
        expirer.execute("SELECT pgsched.expire_leases(%s)", [now + timedelta(minutes=1)])

        def finish() -> None:
            with psycopg.connect(dsn, autocommit=True) as worker:
                row = worker.execute(
                    "SELECT accepted FROM pgsched.complete(%s, %s)", [[job_id], [got["lease_token"]]]
                ).fetchone()
                accepted.append(bool(row and row[0]))

        racer = threading.Thread(target=finish)
        racer.start()
        wait_for_a_lock_wait(conn)  # the completion waits for the expiry's row lock
        expirer.commit()
        racer.join(10)
    assert accepted == [False]
    row = job(conn, job_id)
    assert row is not None
    assert row["state"] == "available"
    assert history(conn, job_id) == []


def test_a_job_claimed_again_by_someone_else_is_not_touched(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    old = claim_one(conn, worker="w1", now=now)
    at = now + timedelta(minutes=1)
    expire_leases(conn, now=at)
    new = claim_one(conn, worker="w2", now=at)
    before = snapshot(conn)
    assert expire_leases(conn, now=at + timedelta(seconds=10)) == 0
    assert snapshot(conn) == before
    assert complete(conn, [pair(old)]) == {job_id: False}
    assert complete(conn, [pair(new)]) == {job_id: True}
    assert [h["leased_by"] for h in history(conn, job_id)] == ["w2"]


def test_limit_bounds_one_call(conn: Conn, now: datetime) -> None:
    enqueue_many(conn, ["t"] * 5)
    claim(conn, 5, now=now)
    at = now + timedelta(minutes=1)
    assert expire_leases(conn, now=at, limit=2) == 2
    assert expire_leases(conn, now=at, limit=2) == 2
    assert expire_leases(conn, now=at, limit=2) == 1
    assert expire_leases(conn, now=at, limit=2) == 0


def test_returned_jobs_wake_their_queue(conn: Conn, listener: Listener, now: datetime) -> None:
    enqueue(conn, queue="mail")
    claim_one(conn, queues=["mail"], now=now)
    listener.drain(1)  # the wake-up of the enqueue
    expire_leases(conn, now=now + timedelta(minutes=1))
    assert listener.payloads(1) == ["mail"]
