"""pgsched.enqueue_many(): one statement for a batch, ids in input order, keys deduplicated."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.sql.conftest import Listener
from tests.sql.helpers import (
    Conn,
    claim_one,
    complete,
    count,
    enqueue,
    enqueue_many,
    job,
    nothing_enqueued,
    pair,
    refused,
)


def test_ids_come_back_in_input_order(conn: Conn) -> None:
    tasks = [f"task_{i}" for i in range(50)]
    ids = enqueue_many(conn, tasks, args=[{"i": i} for i in range(50)])
    assert len(ids) == 50
    assert len(set(ids)) == 50
    for i, job_id in enumerate(ids):
        row = job(conn, job_id)
        assert row is not None
        assert (row["task"], row["args"]) == (f"task_{i}", {"i": i})


def test_parallel_arrays_set_each_job(conn: Conn, now: datetime) -> None:
    later = now + timedelta(hours=1)
    ids = enqueue_many(
        conn,
        ["a", "b"],
        args=[{"x": 1}, None],
        queues=["q1", None],
        run_ats=[None, later],
        priorities=[3, None],
        idempotency_keys=["ka", None],
        max_attempts=[None, 9],
        tenants=["acme", None],
    )
    a, b = (job(conn, i) for i in ids)
    assert a is not None
    assert b is not None
    assert (a["args"], a["queue"], a["state"], a["priority"], a["idempotency_key"], a["max_attempts"], a["tenant"]) == (
        {"x": 1},
        "q1",
        "available",
        3,
        "ka",
        5,
        "acme",
    )
    assert (
        b["args"],
        b["queue"],
        b["state"],
        b["run_at"],
        b["priority"],
        b["idempotency_key"],
        b["max_attempts"],
        b["tenant"],
    ) == ({}, "default", "scheduled", later, 0, None, 9, None)


def test_duplicate_keys_in_one_batch_map_to_the_first_rows_job(conn: Conn) -> None:
    ids = enqueue_many(
        conn,
        ["t", "t", "t", "t", "t"],
        args=[{"n": i} for i in range(5)],
        idempotency_keys=["a", "b", "a", None, "b"],
    )
    assert ids[2] == ids[0]
    assert ids[4] == ids[1]
    assert len({ids[0], ids[1], ids[3]}) == 3
    assert count(conn) == 3
    first_a = job(conn, ids[0])
    assert first_a is not None
    assert first_a["args"] == {"n": 0}


def test_ids_follow_input_order_whatever_the_keys(conn: Conn) -> None:
    keys = ["zulu", None, "alpha", "mike", None]
    ids = enqueue_many(conn, ["t"] * 5, args=[{"i": i} for i in range(5)], idempotency_keys=keys)
    assert ids == sorted(ids)
    for i, job_id in enumerate(ids):
        row = job(conn, job_id)
        assert row is not None
        assert (row["args"], row["idempotency_key"]) == ({"i": i}, keys[i])


def test_keys_held_by_existing_jobs_return_the_holders(conn: Conn, now: datetime) -> None:
    finished = enqueue(conn, idempotency_key="finished")
    assert complete(conn, [pair(claim_one(conn, now=now))], now=now) == {finished: True}
    active = enqueue(conn, idempotency_key="active")
    ids = enqueue_many(conn, ["t", "t", "t"], idempotency_keys=["new", "active", "finished"])
    assert ids[1] == active
    assert ids[2] == finished
    assert ids[0] not in (active, finished)
    assert count(conn) == 2  # "active" and "new"


def test_a_bad_row_refuses_the_whole_batch(conn: Conn) -> None:
    with refused("23514", "jobs_queue_valid"):
        enqueue_many(conn, ["t", "t", "t"], queues=["ok", "not ok", "ok"], idempotency_keys=["k1", "k2", "k3"])
    assert nothing_enqueued(conn)


def test_a_null_task_refuses_the_whole_batch(conn: Conn) -> None:
    with refused("23502") as info:
        enqueue_many(conn, ["t", None])
    assert info.value.diag.column_name == "task"
    assert nothing_enqueued(conn)


def test_an_array_longer_than_tasks_is_refused_not_dropped(conn: Conn) -> None:
    with refused("23502"):
        enqueue_many(conn, ["t"], args=[{"n": 1}, {"n": 2}])
    assert nothing_enqueued(conn)


def test_an_empty_batch_returns_nothing(conn: Conn) -> None:
    assert enqueue_many(conn, []) == []
    assert nothing_enqueued(conn)


def test_a_batch_wakes_each_queue_once(conn: Conn, listener: Listener) -> None:
    enqueue_many(conn, ["t"] * 100, queues=["a"] * 60 + ["b"] * 40)
    assert sorted(listener.payloads(2)) == ["a", "b"]
