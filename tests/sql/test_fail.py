"""pgsched.fail(): retries with backoff from the task/queue/install policy, dead letters, cancellation."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    enqueue,
    events,
    expire_leases,
    fail,
    history,
    job,
    pair,
    promote_due,
    register_tasks,
    scalar,
    snapshot,
)


def run_and_fail(conn: Conn, at: datetime, error: str = "boom", **kw: object) -> tuple[str, dict[str, object]]:
    """Promote, claim and fail the one job at time `at`; returns the new state and the claimed row."""
    promote_due(conn, now=at)
    got = claim_one(conn, now=at)
    return fail(conn, *pair(got), error, now=at, **kw), got  # type: ignore[arg-type]


def delay(conn: Conn, job_id: int, since: datetime) -> timedelta:
    row = job(conn, job_id)
    assert row is not None
    return row["run_at"] - since  # type: ignore[no-any-return]


def test_failure_schedules_a_retry_with_default_backoff(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    new_state, got = run_and_fail(conn, now, "ValueError: nope")
    assert new_state == "scheduled"
    row = job(conn, job_id)
    assert row is not None
    assert row["state"] == "scheduled"
    assert row["attempt"] == 1
    assert row["last_error"] == "ValueError: nope"
    assert row["lease_token"] is None
    assert row["leased_by"] is None
    assert row["lease_expires_at"] is None
    # base 2 s, jitter 0.25: the first retry waits between 1.5 and 2 seconds
    assert timedelta(seconds=1.5) <= delay(conn, job_id, now) <= timedelta(seconds=2)
    [_, failed] = events(conn, job_id)
    assert failed["kind"] == "failed"
    assert failed["token"] == got["lease_token"]
    assert failed["worker"] == "w1"
    assert failed["detail"]["error"] == "ValueError: nope"


def test_backoff_doubles_up_to_the_cap(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET backoff_jitter = 0, backoff_base = '2 s', backoff_max = '10 s'")
    job_id = enqueue(conn, max_attempts=10)
    delays = []
    at = now
    for _ in range(5):
        assert run_and_fail(conn, at)[0] == "scheduled"
        delays.append(delay(conn, job_id, at).total_seconds())
        at = at + timedelta(minutes=1)
    assert delays == [2, 4, 8, 10, 10]


def test_jitter_spreads_retries(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET backoff_jitter = 1, backoff_base = '100 s', backoff_max = '1 h'")
    ids = [enqueue(conn) for _ in range(10)]
    for _ in ids:
        got = claim_one(conn, now=now)
        fail(conn, *pair(got), now=now)
    delays = {delay(conn, i, now) for i in ids}
    assert len(delays) >= 8
    assert all(timedelta(0) <= d <= timedelta(seconds=100) for d in delays)


def test_the_task_policy_overrides_the_install_default(conn: Conn, now: datetime) -> None:
    register_tasks(conn, [{"name": "slow", "backoff_base": 10, "backoff_max": 25, "backoff_jitter": 0}])
    job_id = enqueue(conn, "slow", max_attempts=10)
    other = enqueue(conn, "fast")
    got = [claim_one(conn, now=now) for _ in range(2)]
    for g in got:
        fail(conn, *pair(g), now=now)
    assert delay(conn, job_id, now) == timedelta(seconds=10)
    assert timedelta(seconds=1.5) <= delay(conn, other, now) <= timedelta(seconds=2)
    assert cancel(conn, other) == "cancelled"
    delays = []
    at = now + timedelta(minutes=1)
    for _ in range(2):
        promote_due(conn, now=at)
        fail(conn, *pair(claim_one(conn, now=at)), now=at)
        delays.append(delay(conn, job_id, at))
        at += timedelta(minutes=1)
    assert delays == [timedelta(seconds=20), timedelta(seconds=25)]


def test_the_queue_policy_applies_when_the_task_has_none(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET backoff_jitter = 0")
    conn.execute("INSERT INTO pgsched.queues (name, backoff_base, backoff_max) VALUES ('slowq', '30 s', '1 h')")
    register_tasks(conn, [{"name": "own", "backoff_base": 5}])
    queued = enqueue(conn, "plain", queue="slowq")
    own = enqueue(conn, "own", queue="slowq")
    for _ in range(2):
        fail(conn, *pair(claim_one(conn, queues=["slowq"], now=now)), now=now)
    assert delay(conn, queued, now) == timedelta(seconds=30)
    assert delay(conn, own, now) == timedelta(seconds=5)


def test_an_explicit_retry_at_wins(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    at = now + timedelta(hours=3)
    assert fail(conn, *pair(claim_one(conn, now=now)), retry_at=at, now=now) == "scheduled"
    row = job(conn, job_id)
    assert row is not None
    assert row["run_at"] == at


def test_a_retry_at_in_the_past_is_available_at_once(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    assert fail(conn, *pair(claim_one(conn, now=now)), retry_at=now - timedelta(seconds=1), now=now) == "available"
    got = claim_one(conn, now=now)
    assert (got["id"], got["attempt"]) == (job_id, 2)


def test_the_job_is_dead_after_max_attempts(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "send", {"to": 1}, max_attempts=3)
    at = now
    states = []
    for i in range(3):
        states.append(run_and_fail(conn, at, f"error {i + 1}")[0])
        at += timedelta(hours=1)
    assert states == ["scheduled", "scheduled", "dead"]
    assert job(conn, job_id) is None
    [dead] = history(conn, job_id)
    assert dead["state"] == "dead"
    assert dead["error"] == "error 3"
    assert dead["attempt"] == 3
    assert dead["args"] == {"to": 1}
    assert dead["finished_at"] == now + timedelta(hours=2)
    assert [e["kind"] for e in events(conn, job_id)] == ["claimed", "failed"] * 2 + ["claimed", "dead"]
    assert scalar(conn, "SELECT error FROM pgsched.dead_letters WHERE id = %s", [job_id]) == "error 3"


def test_the_task_policy_sets_the_attempt_budget(conn: Conn, now: datetime) -> None:
    register_tasks(conn, [{"name": "once", "max_attempts": 1}])
    job_id = enqueue(conn, "once")
    assert run_and_fail(conn, now)[0] == "dead"
    assert history(conn, job_id)[0]["state"] == "dead"


def test_final_goes_dead_at_once(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=10)
    assert run_and_fail(conn, now, "GiveUp: bad input", final=True)[0] == "dead"
    [dead] = history(conn, job_id)
    assert (dead["state"], dead["attempt"], dead["error"]) == ("dead", 1, "GiveUp: bad input")


def test_a_cancel_requested_job_ends_cancelled(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=10)
    got = claim_one(conn, now=now)
    assert cancel(conn, job_id) == "cancel_requested"
    assert fail(conn, *pair(got), "interrupted", now=now) == "cancelled"
    [row] = history(conn, job_id)
    assert (row["state"], row["error"]) == ("cancelled", "interrupted")
    assert scalar(conn, "SELECT count(*) FROM pgsched.dead_letters") == 0


@pytest.mark.parametrize("final", [False, True])
def test_a_stale_token_changes_nothing(conn: Conn, now: datetime, final: bool) -> None:
    job_id = enqueue(conn, max_attempts=1 if final else 5)
    old = claim_one(conn, worker="w1", now=now)
    later = now + timedelta(minutes=1)
    expire_leases(conn, now=later)
    if job(conn, job_id) is None:  # max_attempts = 1: the expiry made it dead; redrive it
        assert scalar(conn, "SELECT pgsched.retry(%s)", [job_id]) == "retried"
    claim_one(conn, worker="w2", now=later)
    before = snapshot(conn)
    assert fail(conn, *pair(old), "late", final=final, now=later) == "lease_lost"
    assert snapshot(conn) == before


def test_a_job_that_is_not_running_cannot_fail(conn: Conn) -> None:
    job_id = enqueue(conn)
    token = scalar(conn, "SELECT pg_catalog.nextval('pgsched.lease_token_seq')")
    before = snapshot(conn)
    assert fail(conn, job_id, token, final=True) == "lease_lost"
    assert snapshot(conn) == before
