"""pgsched.promote_due(): due scheduled jobs become claimable; workers are woken once per queue."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg

from tests.sql.conftest import Listener
from tests.sql.helpers import Conn, claim, enqueue, enqueue_many, job, promote_due, snapshot


def test_only_due_jobs_are_promoted(conn: Conn, now: datetime) -> None:
    soon = enqueue(conn, run_at=now + timedelta(minutes=1))
    due = enqueue(conn, run_at=now + timedelta(minutes=5))
    later = enqueue(conn, run_at=now + timedelta(minutes=5, microseconds=1))
    assert promote_due(conn, now=now + timedelta(minutes=5)) == 2
    states = {i: job(conn, i)["state"] for i in (soon, due, later)}  # type: ignore[index]
    assert states == {soon: "available", due: "available", later: "scheduled"}
    assert {r["id"] for r in claim(conn, now=now + timedelta(minutes=5))} == {soon, due}


def test_promotion_keeps_the_due_time(conn: Conn, now: datetime) -> None:
    run_at = now + timedelta(minutes=1)
    job_id = enqueue(conn, run_at=run_at)
    promote_due(conn, now=now + timedelta(hours=1))
    row = job(conn, job_id)
    assert row is not None
    assert row["run_at"] == run_at


def test_nothing_due_changes_nothing(conn: Conn, now: datetime) -> None:
    enqueue(conn, run_at=now + timedelta(hours=1))
    enqueue(conn)
    before = snapshot(conn)
    assert promote_due(conn, now=now + timedelta(minutes=59)) == 0
    assert snapshot(conn) == before


def test_limit_bounds_one_call(conn: Conn, now: datetime) -> None:
    enqueue_many(conn, ["t"] * 5, run_ats=[now + timedelta(minutes=i + 1) for i in range(5)])
    at = now + timedelta(hours=1)
    assert [promote_due(conn, now=at, limit=2) for _ in range(4)] == [2, 2, 1, 0]


def test_promotion_wakes_each_queue_once(conn: Conn, listener: Listener, now: datetime) -> None:
    later = now + timedelta(minutes=1)
    enqueue_many(conn, ["t"] * 5, queues=["a", "a", "a", "b", "c"], run_ats=[later] * 4 + [now + timedelta(hours=1)])
    assert listener.drain(1) == [("pgsched_scheduled", "")]  # the enqueue's
    assert promote_due(conn, now=later) == 4
    assert sorted(listener.payloads(2)) == ["a", "b"]


def test_no_promotion_no_wake_up(conn: Conn, listener: Listener, now: datetime) -> None:
    enqueue(conn, run_at=now + timedelta(hours=1))
    assert listener.drain(1) == [("pgsched_scheduled", "")]
    promote_due(conn, now=now)
    assert listener.drain(settle=0.5) == []


def test_one_notify_per_queue_per_transaction(dsn: str, listener: Listener) -> None:
    with psycopg.connect(dsn) as producer:
        for i in range(100):
            producer.execute("SELECT pgsched.enqueue('t', queue => %s)", ["mail" if i % 4 else "sms"])
        assert listener.drain(settle=0.3) == []  # nothing before the commit
    assert sorted(listener.payloads(2)) == ["mail", "sms"]


def test_a_hundred_jobs_in_one_transaction_send_one_notify(dsn: str, listener: Listener) -> None:
    with psycopg.connect(dsn) as producer:
        for _ in range(100):
            producer.execute("SELECT pgsched.enqueue('t', queue => 'mail')")
    assert listener.payloads(1) == ["mail"]


def test_each_transaction_sends_its_own_notify(conn: Conn, listener: Listener) -> None:
    for _ in range(3):
        enqueue(conn, queue="mail")
    assert listener.payloads(3) == ["mail"] * 3
