"""pgsched.retry(): redrives a dead or cancelled job under its own id, with a fresh attempt budget."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    complete,
    count,
    enqueue,
    events,
    fail,
    history,
    job,
    pair,
    retry,
    scalar,
    snapshot,
)


def kill(conn: Conn, job_id: int, error: str = "boom") -> None:
    """Run the job until it is dead (it must be the only claimable job)."""
    while job(conn, job_id) is not None:
        got = claim_one(conn)
        assert got["id"] == job_id
        fail(conn, *pair(got), error, retry_at=got["run_at"])


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_a_dead_job_is_redriven_under_its_id(conn: Conn, now: datetime) -> None:
    job_id = enqueue(
        conn,
        "send",
        {"to": 1},
        queue="mail",
        priority=4,
        idempotency_key="k",
        max_attempts=2,
        labels=["eu"],
        tenant="acme",
    )
    for _ in range(2):
        got = claim_one(conn, queues=["mail"], labels=["eu"])
        fail(conn, *pair(got), "boom", retry_at=now)
    assert history(conn, job_id)[0]["state"] == "dead"
    assert retry(conn, job_id) == "retried"
    row = job(conn, job_id)
    assert row is not None
    assert (
        row["state"],
        row["task"],
        row["args"],
        row["queue"],
        row["priority"],
        row["idempotency_key"],
        row["labels"],
        row["tenant"],
    ) == ("available", "send", {"to": 1}, "mail", 4, "k", ["eu"], "acme")
    assert row["attempt"] == 2
    assert row["max_attempts"] == 2 + 5  # the attempts used, plus the install default budget
    assert row["run_at"] >= now  # due at once
    assert events(conn, job_id)[-1]["kind"] == "retried"
    assert events(conn, job_id)[-1]["detail"] == {"previous_state": "dead"}
    got = claim_one(conn, queues=["mail"], labels=["eu"])
    assert (got["id"], got["attempt"]) == (job_id, 3)
    assert complete(conn, [pair(got)]) == {job_id: True}
    assert [h["state"] for h in history(conn, job_id)] == ["dead", "completed"]


def test_a_cancelled_job_is_redriven(conn: Conn) -> None:
    job_id = enqueue(conn)
    cancel(conn, job_id)
    assert retry(conn, job_id) == "retried"
    assert claim_one(conn)["id"] == job_id


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_attempts_keep_growing_across_redrives(conn: Conn) -> None:
    job_id = enqueue(conn, max_attempts=1)
    attempts = []
    for _ in range(3):
        got = claim_one(conn)
        attempts.append(got["attempt"])
        assert fail(conn, *pair(got), final=True) == "dead"
        assert retry(conn, job_id) == "retried"
    assert attempts == [1, 2, 3]
    assert [h["attempt"] for h in history(conn, job_id)] == [1, 2, 3]


def test_the_task_policy_sets_the_new_budget(conn: Conn) -> None:
    conn.execute('SELECT pgsched.register_tasks(\'[{"name": "t", "max_attempts": 2}]\')')
    job_id = enqueue(conn)
    kill(conn, job_id)
    assert retry(conn, job_id) == "retried"
    kill(conn, job_id)
    assert [h["attempt"] for h in history(conn, job_id)] == [2, 4]


def test_a_completed_job_is_not_retryable(conn: Conn) -> None:
    job_id = enqueue(conn)
    complete(conn, [pair(claim_one(conn))])
    before = snapshot(conn)
    assert retry(conn, job_id) == "not_retryable"
    assert snapshot(conn) == before


def test_an_active_job_is_reported_active(conn: Conn) -> None:
    waiting = enqueue(conn)
    assert retry(conn, waiting) == "active"
    claim_one(conn)
    assert retry(conn, waiting) == "active"
    assert count(conn) == 1


def test_a_second_redrive_is_a_no_op(conn: Conn) -> None:
    job_id = enqueue(conn)
    cancel(conn, job_id)
    assert retry(conn, job_id) == "retried"
    before = snapshot(conn)
    assert retry(conn, job_id) == "active"
    assert snapshot(conn) == before


def test_an_unknown_job_is_not_found(conn: Conn) -> None:
    assert retry(conn, 424242) == "not_found"


def test_a_redriven_job_holds_its_idempotency_key_again(conn: Conn) -> None:
    job_id = enqueue(conn, idempotency_key="k")
    cancel(conn, job_id)
    retry(conn, job_id)
    assert scalar(conn, "SELECT expires_at FROM pgsched.idempotency_keys WHERE key = 'k'") is None
    assert enqueue(conn, idempotency_key="k") == job_id
    assert count(conn) == 1


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_dead_letters_show_only_the_latest_outcome(conn: Conn) -> None:
    job_id = enqueue(conn, max_attempts=1)
    kill(conn, job_id, "first")
    assert scalar(conn, "SELECT count(*) FROM pgsched.dead_letters") == 1
    retry(conn, job_id)
    assert scalar(conn, "SELECT count(*) FROM pgsched.dead_letters") == 0
    kill(conn, job_id, "second")
    rows = conn.execute("SELECT id, error FROM pgsched.dead_letters").fetchall()
    assert rows == [{"id": job_id, "error": "second"}]
