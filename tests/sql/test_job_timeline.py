"""Audit by exception: job_events records only what the job's row cannot tell; pgsched.job_timeline gives it all."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.sql.helpers import (
    Conn,
    claim_one,
    complete,
    enqueue,
    expire_leases,
    fail,
    pair,
    promote_due,
    release,
    retry,
    scalar,
    snooze,
)


def recorded(conn: Conn, job_id: int) -> list[str]:
    rows = conn.execute("SELECT kind FROM pgsched.job_events WHERE job_id = %s ORDER BY seq", [job_id]).fetchall()
    return [r["kind"] for r in rows]


def timeline(conn: Conn, job_id: int) -> list[tuple[str, int, str | None, int | None, datetime, str]]:
    rows = conn.execute(
        "SELECT kind, attempt, worker, token, at, source FROM pgsched.job_timeline WHERE job_id = %s", [job_id]
    ).fetchall()
    return [(r["kind"], r["attempt"], r["worker"], r["token"], r["at"], r["source"]) for r in rows]


def test_a_job_that_succeeds_at_its_first_claim_records_no_event(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, worker="w1", now=now)
    token = got["lease_token"]
    assert timeline(conn, job_id) == [("claimed", 1, "w1", token, now, "derived")]
    done = now + timedelta(seconds=2)
    complete(conn, [pair(got)], now=done)
    assert recorded(conn, job_id) == []
    assert timeline(conn, job_id) == [
        ("claimed", 1, "w1", token, now, "derived"),
        ("completed", 1, "w1", token, done, "derived"),
    ]
    assert scalar(conn, "SELECT claimed_at FROM pgsched.job_history WHERE id = %s", [job_id]) == now


def test_a_failed_attempt_records_its_claim_and_failure(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=3)
    first = claim_one(conn, worker="w1", now=now)
    fail(conn, *pair(first), retry_at=now + timedelta(seconds=1), now=now + timedelta(seconds=1))
    assert recorded(conn, job_id) == ["claimed", "failed"]
    second = claim_one(conn, worker="w2", now=now + timedelta(seconds=2))
    complete(conn, [pair(second)], now=now + timedelta(seconds=3))
    assert recorded(conn, job_id) == ["claimed", "failed"]  # the successful attempt adds nothing
    assert timeline(conn, job_id) == [
        ("claimed", 1, "w1", first["lease_token"], now, "recorded"),
        ("failed", 1, "w1", first["lease_token"], now + timedelta(seconds=1), "recorded"),
        ("claimed", 2, "w2", second["lease_token"], now + timedelta(seconds=2), "derived"),
        ("completed", 2, "w2", second["lease_token"], now + timedelta(seconds=3), "derived"),
    ]


def test_hand_backs_expiries_and_deaths_record_the_claims_of_their_attempts(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=2)
    t = [now + timedelta(seconds=s) for s in range(10)]
    a = claim_one(conn, worker="w1", now=t[0])
    snooze(conn, *pair(a), run_at=t[1], now=t[1])
    b = claim_one(conn, worker="w2", now=t[2])
    release(conn, [pair(b)], now=t[3])
    c = claim_one(conn, worker="w3", now=t[4], lease=timedelta(seconds=1))
    expire_leases(conn, now=t[6])
    d = claim_one(conn, worker="w4", now=t[7])
    fail(conn, *pair(d), now=t[8])  # attempts used up: dead
    got = timeline(conn, job_id)
    assert [(k, att, w) for k, att, w, *_ in got] == [
        ("claimed", 1, "w1"),
        ("snoozed", 1, None),
        ("claimed", 2, "w2"),
        ("released", 2, None),
        ("claimed", 3, "w3"),
        ("lease_expired", 3, "w3"),
        ("claimed", 4, "w4"),
        ("dead", 4, "w4"),
    ]
    assert [g[3] for g in got] == [x["lease_token"] for x in (a, a, b, b, c, c, d, d)]
    assert [g[4] for g in got] == [t[0], t[1], t[2], t[3], t[4], t[6], t[7], t[8]]
    assert {g[5] for g in got} == {"recorded"}
    # a redriven dead job runs again; its successful run adds nothing recorded
    assert retry(conn, job_id, now=t[9]) == "retried"
    promote_due(conn, now=t[9])  # due at t[9], ahead of the real clock
    e = claim_one(conn, worker="w5", now=t[9])
    complete(conn, [pair(e)], now=t[9] + timedelta(seconds=1))
    assert [(k, att, src) for k, att, _, _, _, src in timeline(conn, job_id)][-3:] == [
        ("retried", 4, "recorded"),
        ("claimed", 5, "derived"),
        ("completed", 5, "derived"),
    ]


def test_claims_recorded_before_audit_by_exception_are_not_derived_twice(conn: Conn, now: datetime) -> None:
    """Rows filed by an older release (recorded claimed/completed, no history claimed_at) read the same."""
    enqueue(conn), enqueue(conn)
    r = claim_one(conn, worker="w1", now=now)
    d = claim_one(conn, worker="w1", now=now)
    running, done = r["id"], d["id"]
    complete(conn, [pair(d)], now=now + timedelta(seconds=1))
    for got, kind, at in ((r, "claimed", now), (d, "claimed", now), (d, "completed", now + timedelta(seconds=1))):
        conn.execute(
            "INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)"
            " VALUES (%s, %s, %s, 1, 'w1', %s)",
            [got["id"], at, kind, got["lease_token"]],
        )
    conn.execute("UPDATE pgsched.job_history SET claimed_at = NULL WHERE id = %s", [done])
    assert [(k, src) for k, *_, src in timeline(conn, running)] == [("claimed", "recorded")]
    assert [(k, src) for k, *_, src in timeline(conn, done)] == [("claimed", "recorded"), ("completed", "recorded")]


def test_audit_off_records_nothing_but_the_timeline_still_derives(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET audit = false")
    job_id = enqueue(conn, max_attempts=3)
    fail(conn, *pair(claim_one(conn, now=now)), retry_at=now, now=now)
    complete(conn, [pair(claim_one(conn, now=now + timedelta(seconds=1)))], now=now + timedelta(seconds=2))
    assert recorded(conn, job_id) == []
    assert [k for k, *_ in timeline(conn, job_id)] == ["claimed", "completed"]
