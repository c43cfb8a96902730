"""pgsched.next_due(): when the earliest scheduled job falls due, so a scanner can sleep until then."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.sql.helpers import Conn, cancel, enqueue, job, promote_due, scalar


def next_due(conn: Conn, shard: int | None = None) -> datetime | None:
    return scalar(conn, "SELECT pgsched.next_due(%s) AS at", [shard])  # type: ignore[no-any-return]


def test_nothing_scheduled_gives_null(conn: Conn) -> None:
    enqueue(conn)  # due now: available, not scheduled
    assert next_due(conn) is None


def test_the_earliest_scheduled_run_at(conn: Conn, now: datetime) -> None:
    enqueue(conn, run_at=now + timedelta(hours=2))
    first = enqueue(conn, run_at=now + timedelta(minutes=3))
    enqueue(conn, run_at=now + timedelta(days=1))
    assert next_due(conn) == now + timedelta(minutes=3)
    cancel(conn, first)
    assert next_due(conn) == now + timedelta(hours=2)


def test_promoted_jobs_are_no_longer_next(conn: Conn, now: datetime) -> None:
    enqueue(conn, run_at=now + timedelta(minutes=1))
    enqueue(conn, run_at=now + timedelta(minutes=10))
    promote_due(conn, now=now + timedelta(minutes=5))
    assert next_due(conn) == now + timedelta(minutes=10)


def test_per_shard(conn: Conn, now: datetime) -> None:
    a = enqueue(conn, run_at=now + timedelta(minutes=1), idempotency_key="a")
    shard_a = job(conn, a)["shard"]  # type: ignore[index]
    key = next(f"k{i}" for i in range(1000) if scalar(conn, "SELECT pgsched._shard_for_key(%s)", [f"k{i}"]) != shard_a)
    b = enqueue(conn, run_at=now + timedelta(minutes=2), idempotency_key=key)
    shard_b = job(conn, b)["shard"]  # type: ignore[index]
    assert next_due(conn, shard_a) == now + timedelta(minutes=1)
    assert next_due(conn, shard_b) == now + timedelta(minutes=2)
    empty = next(s for s in range(8) if s not in (shard_a, shard_b))
    assert next_due(conn, empty) is None
