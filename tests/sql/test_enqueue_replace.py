"""pgsched.enqueue(on_conflict => 'replace'): a repeated key moves the job that has not started (debounce)."""

from __future__ import annotations

from datetime import datetime, timedelta

from psycopg.types.json import Jsonb

from tests.sql.helpers import (
    Conn,
    claim,
    claim_one,
    complete,
    count,
    enqueue,
    job,
    pair,
    promote_due,
    refused,
    scalar,
    snapshot,
)

REPLACE_REFUSED = "PS423"


def test_debounce_ten_events_one_second_apart_make_one_run_five_seconds_after_the_last(
    conn: Conn, now: datetime
) -> None:
    ids = set()
    for i in range(10):
        at = now + timedelta(seconds=i)
        ids.add(
            enqueue(
                conn,
                "flush",
                {"n": i},
                idempotency_key="user:1",
                on_conflict="replace",
                run_at=at + timedelta(seconds=5),
                p_now=at,
            )
        )
    assert len(ids) == 1
    (job_id,) = ids
    last = now + timedelta(seconds=9)
    # Not due at any time before 5 s after the last event...
    assert promote_due(conn, now=last + timedelta(seconds=4.9)) == 0
    assert claim(conn, now=last + timedelta(seconds=4.9)) == []
    # ...and one run then, with the last event's args.
    assert promote_due(conn, now=last + timedelta(seconds=5)) == 1
    rows = claim(conn, now=last + timedelta(seconds=5))
    assert [(r["id"], r["args"]) for r in rows] == [(job_id, {"n": 9})]
    assert rows[0]["run_at"] == last + timedelta(seconds=5)
    assert claim(conn, now=last + timedelta(seconds=60)) == []
    assert count(conn, "jobs") == 1


def test_replace_updates_args_run_at_and_priority_and_keeps_id_and_shard(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, "t", {"a": 1}, idempotency_key="k", run_at=now + timedelta(hours=1), priority=1)
    before = job(conn, first)
    again = enqueue(conn, "t", {"a": 2}, idempotency_key="k", on_conflict="replace", run_at=now, priority=7)
    after = job(conn, again)
    assert again == first
    assert before is not None
    assert after is not None
    assert (after["args"], after["run_at"], after["priority"], after["state"]) == ({"a": 2}, now, 7, "available")
    assert (after["shard"], after["created_at"], after["attempt"]) == (before["shard"], before["created_at"], 0)
    assert claim_one(conn)["id"] == first


def test_keep_is_the_default_and_keeps_the_first_enqueue(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, "t", {}, idempotency_key="k", run_at=now + timedelta(seconds=5))
    assert enqueue(conn, "t", {}, idempotency_key="k", run_at=now + timedelta(seconds=50)) == first
    assert enqueue(conn, "t", {}, idempotency_key="k", on_conflict="keep", run_at=now) == first
    row = job(conn, first)
    assert row is not None
    assert row["run_at"] == now + timedelta(seconds=5)


def test_replace_of_a_started_job_is_refused_and_changes_nothing(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "t", {"a": 1}, idempotency_key="k")
    claimed = claim_one(conn)
    before = snapshot(conn)
    with refused(REPLACE_REFUSED) as info:
        enqueue(conn, "t", {"a": 2}, idempotency_key="k", on_conflict="replace", run_at=now + timedelta(minutes=1))
    assert f"job {job_id}" in str(info.value)
    assert "running" in str(info.value)
    assert snapshot(conn) == before
    # The fencing rules hold: the lease is the worker's, its token completes the job.
    assert complete(conn, [pair(claimed)]) == {job_id: True}


def test_replace_of_a_finished_job_within_the_retention_is_refused(conn: Conn) -> None:
    job_id = enqueue(conn, "t", {}, idempotency_key="k")
    complete(conn, [pair(claim_one(conn))])
    with refused(REPLACE_REFUSED) as info:
        enqueue(conn, "t", {}, idempotency_key="k", on_conflict="replace")
    assert f"job {job_id}" in str(info.value)
    assert "completed" in str(info.value)


def test_replace_with_another_task_is_a_conflict(conn: Conn) -> None:
    enqueue(conn, "t", {}, idempotency_key="k")
    with refused("PS422"):
        enqueue(conn, "other", {}, idempotency_key="k", on_conflict="replace")


def test_replace_without_a_holder_enqueues(conn: Conn) -> None:
    job_id = enqueue(conn, "t", {"a": 1}, idempotency_key="k", on_conflict="replace")
    row = job(conn, job_id)
    assert row is not None
    assert row["args"] == {"a": 1}


def test_replace_moves_a_waiting_job_without_releasing_it(conn: Conn, now: datetime) -> None:
    dep = enqueue(conn, "t", {})
    job_id = enqueue(conn, "t", {"a": 1}, idempotency_key="k", depends_on=[dep])
    assert enqueue(conn, "t", {"a": 2}, idempotency_key="k", on_conflict="replace", run_at=now) == job_id
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["args"]) == ("waiting", {"a": 2})


def test_replace_restamps_the_claim_order(conn: Conn, now: datetime) -> None:
    low = enqueue(conn, "t", {}, idempotency_key="low")
    high = enqueue(conn, "t", {}, idempotency_key="high")
    enqueue(conn, "t", {}, idempotency_key="low", on_conflict="replace", run_at=now, priority=10)
    assert [r["id"] for r in claim(conn, 2, start_shard=None)] == [low, high]


def test_bad_on_conflict_is_refused_naming_the_value(conn: Conn) -> None:
    with refused("22023") as info:
        enqueue(conn, "t", {}, idempotency_key="k", on_conflict="overwrite")
    assert "'overwrite'" in str(info.value)
    assert count(conn, "jobs") == 0


def test_replace_from_psql(conn: Conn) -> None:
    first = scalar(
        conn, "SELECT pgsched.enqueue('t', '{}', idempotency_key => 'k', run_at => now() + interval '1 hour')"
    )
    again = scalar(
        conn,
        "SELECT pgsched.enqueue('t', %s, idempotency_key => 'k', run_at => now() + interval '2 hours',"
        " on_conflict => 'replace')",
        [Jsonb({"x": 1})],
    )
    assert again == first
    row = job(conn, first)
    assert row is not None
    assert row["args"] == {"x": 1}


def test_a_null_on_conflict_keeps(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, "t", {"a": 1}, idempotency_key="k")
    assert enqueue(conn, "t", {"a": 1}, idempotency_key="k", on_conflict=None, run_at=now) == first
