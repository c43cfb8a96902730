"""The operator's views: pgsched.queue_stats, pgsched.dead_letters, pgsched.workers_live."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    complete,
    enqueue,
    enqueue_many,
    fail,
    heartbeat,
    pair,
    retry,
)


def stats(conn: Conn) -> dict[str, dict[str, Any]]:
    return {r["queue"]: r for r in conn.execute("SELECT * FROM pgsched.queue_stats").fetchall()}


def test_depth_by_state_per_queue(conn: Conn, now: datetime) -> None:
    enqueue(conn, queue="q")
    claim_one(conn, queues=["q"], now=now - timedelta(hours=1))  # its lease ran out long ago
    enqueue(conn, queue="q")
    claim_one(conn, queues=["q"])
    enqueue(conn, queue="q")
    fail(conn, *pair(claim_one(conn, queues=["q"])), retry_at=now + timedelta(hours=1))  # waits for a retry
    enqueue_many(conn, ["t"] * 3, queues=["q"] * 3)
    enqueue_many(conn, ["t"] * 2, queues=["q"] * 2, run_ats=[now + timedelta(hours=1)] * 2)
    enqueue(conn, queue="other")
    conn.execute("SELECT pgsched.pause_queue('idle')")
    got = stats(conn)
    assert set(got) == {"q", "other", "idle"}
    q = got["q"]
    # Claimed by SQL and never started (pgsched.start()): leased, waiting for a slot.
    assert (q["scheduled"], q["available"], q["claimed"], q["running"], q["retrying"], q["lease_expired"]) == (
        3,
        3,
        2,
        0,
        1,
        1,
    )
    assert q["paused"] is False
    other = got["other"]
    assert (other["scheduled"], other["available"], other["running"], other["retrying"]) == (0, 1, 0, 0)
    idle = got["idle"]
    assert (idle["paused"], idle["scheduled"], idle["available"], idle["running"]) == (True, 0, 0, 0)
    assert idle["oldest_due_age_s"] == 0
    assert idle["lag_p50_s"] is None


def test_oldest_due_age_counts_available_and_overdue_scheduled_jobs(conn: Conn, now: datetime) -> None:
    enqueue(conn, queue="a", run_at=now - timedelta(hours=1))
    enqueue(conn, queue="a", run_at=now + timedelta(hours=1))
    assert 3600 <= stats(conn)["a"]["oldest_due_age_s"] < 3660
    # a retry that fell due but was not promoted yet is overdue too
    enqueue(conn, queue="b")
    got = claim_one(conn, queues=["b"], now=now - timedelta(hours=3))
    fail(conn, *pair(got), retry_at=now - timedelta(hours=2), now=now - timedelta(hours=3))
    b = stats(conn)["b"]
    assert (b["scheduled"], b["available"]) == (1, 0)
    assert 7200 <= b["oldest_due_age_s"] < 7260


def test_lag_percentiles_over_the_last_five_minutes(conn: Conn, now: datetime) -> None:
    due = now - timedelta(minutes=10)
    enqueue_many(conn, ["t"] * 100, queues=["q"] * 100, run_ats=[due] * 100)
    hour = timedelta(hours=1)  # leases that last until the completions below
    claimed = [claim_one(conn, queues=["q"], lease=hour, now=due + timedelta(seconds=i)) for i in range(1, 101)]
    complete(conn, [pair(c) for c in claimed], now=now)
    enqueue(conn, queue="q", run_at=due)
    old = claim_one(conn, queues=["q"], lease=hour, now=due + timedelta(seconds=3))
    complete(conn, [pair(old)], now=now - timedelta(minutes=6))  # outside the window
    q = stats(conn)["q"]
    assert q["completed_5m"] == 100
    assert q["completed_per_s"] == pytest.approx(0.33)
    assert q["lag_p50_s"] == pytest.approx(50.5)
    assert q["lag_p95_s"] == pytest.approx(95.05)
    assert q["lag_p99_s"] == pytest.approx(99.01)


def test_recent_outcomes_are_counted_per_queue(conn: Conn) -> None:
    enqueue(conn, queue="q", max_attempts=1)
    fail(conn, *pair(claim_one(conn, queues=["q"])))
    cancel(conn, enqueue(conn, queue="q"))
    enqueue(conn, queue="r")
    complete(conn, [pair(claim_one(conn, queues=["r"]))])
    got = stats(conn)
    assert (got["q"]["completed_5m"], got["q"]["dead_5m"], got["q"]["cancelled_5m"]) == (0, 1, 1)
    assert (got["r"]["completed_5m"], got["r"]["dead_5m"], got["r"]["cancelled_5m"]) == (1, 0, 0)
    assert got["q"]["available"] == 0


def test_dead_letters_list_dead_jobs_awaiting_a_decision(conn: Conn) -> None:
    dead = enqueue(conn, "send", {"to": 1}, queue="mail", max_attempts=1, idempotency_key="k")
    fail(conn, *pair(claim_one(conn, queues=["mail"], worker="w9")), "SMTP 550")
    cancel(conn, enqueue(conn, queue="mail"))
    enqueue(conn, queue="mail")
    complete(conn, [pair(claim_one(conn, queues=["mail"]))])
    rows = conn.execute("SELECT * FROM pgsched.dead_letters").fetchall()
    assert len(rows) == 1
    row = rows[0]
    assert (
        row["id"],
        row["queue"],
        row["task"],
        row["args"],
        row["attempt"],
        row["max_attempts"],
        row["error"],
        row["idempotency_key"],
        row["last_worker"],
    ) == (dead, "mail", "send", {"to": 1}, 1, 1, "SMTP 550", "k", "w9")
    assert row["died_at"] is not None


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_a_redriven_job_leaves_the_dead_letters(conn: Conn) -> None:
    job_id = enqueue(conn, max_attempts=1)
    fail(conn, *pair(claim_one(conn)))
    assert retry(conn, job_id) == "retried"
    assert conn.execute("SELECT * FROM pgsched.dead_letters").fetchall() == []
    complete(conn, [pair(claim_one(conn))])
    assert conn.execute("SELECT * FROM pgsched.dead_letters").fetchall() == []


def test_workers_live_shows_recent_workers_and_what_they_hold(conn: Conn, now: datetime) -> None:
    conn.execute("SELECT pgsched.register_worker('w1', 'host-a', 42, ARRAY['default'], '{}', 4, '1.0')")
    conn.execute("SELECT pgsched.register_worker('w2')")
    enqueue_many(conn, ["t"] * 2)
    got = [claim_one(conn, worker="w1") for _ in range(2)]
    heartbeat(conn, [pair(g) for g in got], worker="w1")
    heartbeat(conn, [], worker="w2", now=now - timedelta(minutes=2))  # last seen two minutes ago
    rows = conn.execute("SELECT * FROM pgsched.workers_live").fetchall()
    # Claimed, not started: they count as claimed (waiting for a slot), not running.
    assert [(r["name"], r["host"], r["pid"], r["claimed"], r["running"], r["concurrency"]) for r in rows] == [
        ("w1", "host-a", 42, 2, 0, 4)
    ]
