"""pgsched.record_step(): durable steps' results, fenced by the lease token, carried to history and the timeline."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from tests.sql.helpers import (
    Conn,
    claim_one,
    complete,
    enqueue,
    events,
    expire_leases,
    fail,
    history,
    job,
    pair,
    refused,
    scalar,
    snapshot,
)


def record(conn: Conn, got: tuple[int, int], name: Any, result: Any, *, now: datetime | None = None) -> str:
    return str(
        scalar(
            conn,
            "SELECT pgsched.record_step(%s, %s, %s, %s, %s)",
            [got[0], got[1], name, None if result is None else Jsonb(result), now],
        )
    )


def test_steps_are_appended_in_order_with_attempt_and_token(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    assert record(conn, pair(got), "fetch", {"rows": 3}, now=now) == "recorded"
    assert record(conn, pair(got), "load", [1, 2], now=now + timedelta(seconds=1)) == "recorded"
    row = job(conn, job_id)
    assert row is not None
    assert [(s["name"], s["result"], s["attempt"], s["token"], s["worker"]) for s in row["steps"]] == [
        ("fetch", {"rows": 3}, 1, got["lease_token"], "w1"),
        ("load", [1, 2], 1, got["lease_token"], "w1"),
    ]


def test_a_step_recorded_twice_keeps_its_first_result(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = pair(claim_one(conn, now=now))
    record(conn, got, "fetch", 1, now=now)
    assert record(conn, got, "fetch", 2, now=now) == "exists"
    row = job(conn, job_id)
    assert row is not None
    assert [s["result"] for s in row["steps"]] == [1]


def test_a_stale_workers_step_is_refused_and_the_next_run_sees_the_recorded_ones(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    old = pair(claim_one(conn, worker="w1", now=now))
    assert record(conn, old, "one", "first", now=now) == "recorded"
    assert expire_leases(conn, now=now + timedelta(minutes=5)) == 1
    new = pair(claim_one(conn, worker="w2", now=now + timedelta(minutes=5)))
    before = snapshot(conn)
    assert record(conn, old, "two", "stale", now=now + timedelta(minutes=6)) == "lease_lost"
    assert snapshot(conn) == before
    assert record(conn, new, "two", "second", now=now + timedelta(minutes=6)) == "recorded"
    row = job(conn, job_id)
    assert row is not None
    assert [(s["name"], s["attempt"]) for s in row["steps"]] == [("one", 1), ("two", 2)]


def test_steps_survive_a_failed_attempt_and_go_to_history_and_the_timeline(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    first = pair(claim_one(conn, now=now))
    record(conn, first, "one", "a", now=now + timedelta(seconds=1))
    fail(conn, first[0], first[1], "boom", retry_at=now + timedelta(seconds=2), now=now + timedelta(seconds=2))
    second = pair(claim_one(conn, now=now + timedelta(seconds=3)))
    record(conn, second, "two", "b", now=now + timedelta(seconds=4))
    assert complete(conn, [second], now=now + timedelta(seconds=5)) == {job_id: True}
    [done] = history(conn, job_id)
    assert [s["name"] for s in done["steps"]] == ["one", "two"]
    steps = [(e["attempt"], e["detail"]) for e in events(conn, job_id) if e["kind"] == "step"]
    assert steps == [(1, {"name": "one"}), (2, {"name": "two"})]


def test_bad_steps_are_refused_and_write_nothing(conn: Conn, now: datetime) -> None:
    enqueue(conn)
    got = pair(claim_one(conn, now=now))
    before = snapshot(conn)
    for name in ("", "x" * 201, None):
        with refused("22023") as info:
            record(conn, got, name, 1, now=now)
        assert "step name" in str(info.value)
    with refused("22023"):
        record(conn, got, "none", None, now=now)
    conn.execute("UPDATE pgsched.config SET max_payload_bytes = 100")
    with refused("54000") as info:
        record(conn, got, "big", "x" * 200, now=now)
    assert "max_payload_bytes" in str(info.value)
    conn.execute("UPDATE pgsched.config SET max_payload_bytes = DEFAULT")
    assert snapshot(conn) == before


def test_json_null_is_a_result(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = pair(claim_one(conn, now=now))
    assert scalar(conn, "SELECT pgsched.record_step(%s, %s, 'nil', 'null'::jsonb, %s)", [got[0], got[1], now]) == (
        "recorded"
    )
    row = job(conn, job_id)
    assert row is not None
    assert any(s["name"] == "nil" and s["result"] is None for s in row["steps"])
