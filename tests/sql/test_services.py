"""Issue 10.6: service jobs (jobs.service) in SQL: restarted by lease expiry, never dead by it, one alive per key."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    complete,
    events,
    expire_leases,
    fail,
    history,
    job,
    pair,
    scalar,
)

LEASE = timedelta(seconds=30)


def enqueue_service(conn: Conn, task: str = "svc", key: str | None = None, **named: object) -> int:
    return int(
        scalar(
            conn,
            "SELECT pgsched.enqueue_service(%s, %s, idempotency_key => %s, max_attempts => %s)",
            [task, Jsonb(named.get("args", {})), key, named.get("max_attempts")],
        )
    )


def test_lease_expiries_restart_a_service_and_never_send_it_dead(conn: Conn, now: datetime) -> None:
    job_id = enqueue_service(conn, max_attempts=2)
    at = now
    for run in range(1, 6):  # more expiries than max_attempts
        got = claim_one(conn, worker=f"w{run}", now=at)
        assert (got["id"], got["attempt"]) == (job_id, run)
        at += LEASE + timedelta(seconds=1)
        assert expire_leases(conn, now=at) == 1
        row = job(conn, job_id)
        assert row is not None
        assert (row["state"], row["service"]) == ("available", True)
        assert row["max_attempts"] == 2 + run  # each expiry gives its attempt back
    assert history(conn, job_id) == []
    assert [e["detail"]["outcome"] for e in events(conn, job_id) if e["kind"] == "lease_expired"] == ["available"] * 5


def test_a_plain_job_still_goes_dead_after_its_last_expiry(conn: Conn, now: datetime) -> None:
    job_id = int(scalar(conn, "SELECT pgsched.enqueue('svc', max_attempts => 1)"))
    claim_one(conn, now=now)
    assert expire_leases(conn, now=now + LEASE + timedelta(seconds=1)) == 1
    assert [h["state"] for h in history(conn, job_id)] == ["dead"]


def test_failures_of_a_service_still_count_against_its_attempts(conn: Conn, now: datetime) -> None:
    job_id = enqueue_service(conn, max_attempts=1)
    got = claim_one(conn, now=now)
    assert fail(conn, job_id, got["lease_token"], "crashed", now=now) == "dead"
    assert history(conn, job_id)[0]["service"] is True


def test_a_cancel_requested_service_whose_worker_died_ends_cancelled(conn: Conn, now: datetime) -> None:
    job_id = enqueue_service(conn)
    claim_one(conn, now=now)
    assert cancel(conn, job_id, now=now) == "cancel_requested"
    assert expire_leases(conn, now=now + LEASE + timedelta(seconds=1)) == 1
    assert [h["state"] for h in history(conn, job_id)] == ["cancelled"]


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_one_service_alive_per_key_and_the_key_is_free_once_it_ended(conn: Conn, now: datetime) -> None:
    first = enqueue_service(conn, key="ingest")
    assert enqueue_service(conn, key="ingest") == first  # waiting
    got = claim_one(conn, now=now)
    assert enqueue_service(conn, key="ingest") == first  # running
    assert cancel(conn, first) == "cancel_requested"
    assert fail(conn, first, got["lease_token"], "cancelled: stopped") == "cancelled"
    second = enqueue_service(conn, key="ingest")
    assert second != first
    # A service that returned also frees its key.
    got = claim_one(conn)
    assert complete(conn, [pair(got)]) == {second: True}
    assert history(conn, second)[0]["service"] is True
    assert enqueue_service(conn, key="ingest") not in (first, second)
    # Plain jobs keep theirs for the retention window.
    plain = int(scalar(conn, "SELECT pgsched.enqueue('t', idempotency_key => 'plain')"))
    assert cancel(conn, plain) == "cancelled"
    assert int(scalar(conn, "SELECT pgsched.enqueue('t', idempotency_key => 'plain')")) == plain


def test_a_plain_insert_can_make_a_service_and_retry_keeps_it_one(conn: Conn) -> None:
    conn.execute("INSERT INTO pgsched.jobs (task, args, service) VALUES ('svc', '{}', true)")
    job_id = int(scalar(conn, "SELECT id FROM pgsched.jobs WHERE task = 'svc'"))
    assert cancel(conn, job_id) == "cancelled"
    assert scalar(conn, "SELECT pgsched.retry(%s)", [job_id]) == "retried"
    row = job(conn, job_id)
    assert row is not None
    assert row["service"] is True


def test_enqueue_service_checks_like_enqueue(conn: Conn) -> None:
    import psycopg
    import pytest

    with pytest.raises(psycopg.errors.CheckViolation, match="not a valid task name"):
        conn.execute("SELECT pgsched.enqueue_service('bad task')")
    with pytest.raises(psycopg.errors.CheckViolation, match="args must be a JSON object"):
        conn.execute("SELECT pgsched.enqueue_service('svc', '[]')")
    assert scalar(conn, "SELECT count(*) FROM pgsched.jobs") == 0
