"""pgsched.enqueue_many(): one statement for a batch, ids in input order, keys deduplicated."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

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
        args=[{"n": 0}, {"n": 1}, {"n": 0}, {"n": 3}, {"n": 1}],
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
    with refused("23514", "jobs_queue_valid") as info:
        enqueue_many(conn, ["t", "t", "t"], queues=["ok", "not ok", "ok"], idempotency_keys=["k1", "k2", "k3"])
    assert "row 2 of the batch: queue 'not ok'" in str(info.value)
    assert nothing_enqueued(conn)


def test_a_null_task_refuses_the_whole_batch(conn: Conn) -> None:
    with refused("23502") as info:
        enqueue_many(conn, ["t", None])
    assert info.value.diag.column_name == "task"
    assert nothing_enqueued(conn)


def test_an_array_longer_than_tasks_is_refused_not_dropped(conn: Conn) -> None:
    with refused("22023") as info:
        enqueue_many(conn, ["t"], args=[{"n": 1}, {"n": 2}])
    assert "args has 2 elements, tasks has 1" in str(info.value)
    assert nothing_enqueued(conn)


@pytest.mark.parametrize(
    "arrays",
    [
        {"idempotency_keys": ["k1", "k2"]},
        {"args": [{"n": 1}]},
        {"queues": []},
        {"priorities": [1, 2]},
        {"run_ats": [None]},
        {"max_attempts": [1, 2, 3, 4]},
        {"tenants": ["a"]},
        {"labels": [["gpu"]]},
        {"timeouts": [timedelta(seconds=1)]},
        {"concurrency_keys": ["a", "b"]},
    ],
    ids=lambda a: next(iter(a)),
)
def test_an_array_of_another_length_is_refused(conn: Conn, arrays: dict[str, list[Any]]) -> None:
    name, values = next(iter(arrays.items()))
    with refused("22023") as info:
        enqueue_many(conn, ["t", "t", "t"], **arrays)
    assert f"{name} has {len(values)} elements, tasks has 3" in str(info.value)
    assert nothing_enqueued(conn)


def test_a_bad_row_deep_in_a_big_batch_leaves_nothing(conn: Conn) -> None:
    queues = ["ok"] * 1000
    queues[500] = "not ok"  # row 501, 1-based like the ord returned
    keys = [f"k{i}" for i in range(1000)]
    with refused("23514", "jobs_queue_valid") as info:
        enqueue_many(conn, ["t"] * 1000, queues=queues, idempotency_keys=keys, labels=[["gpu"]] * 1000)
    assert "row 501 of the batch: queue 'not ok'" in str(info.value)
    assert info.value.diag.column_name == "queue"
    assert nothing_enqueued(conn)


@pytest.mark.parametrize(
    ("arrays", "sqlstate", "shown"),
    [
        ({"priorities": [0, 0, 5_000_000]}, "23514", "row 3 of the batch: priority 5000000"),
        ({"max_attempts": [None, 0, None]}, "23514", "row 2 of the batch: max_attempts 0"),
        ({"idempotency_keys": [None, None, "k" * 3000]}, "23514", "row 3 of the batch: idempotency_key"),
        ({"args": [{}, [1], {}]}, "23514", "row 2 of the batch: args must be a JSON object, not array"),
        ({"labels": [["gpu"], [""], None]}, "23514", """row 2 of the batch: labels '[""]'"""),
        ({"labels": [None, None, ["a", None]]}, "23514", "row 3 of the batch: labels"),
        ({"labels": [None, {"a": 1}, None]}, "23514", "row 2 of the batch: labels"),
        ({"tenants": [None, "", None]}, "23514", "row 2 of the batch: tenant ''"),
        ({"run_ats": [None, None, "infinity"]}, "23514", "row 3 of the batch: run_at infinity"),
        ({"timeouts": [None, timedelta(0), None]}, "23514", "row 2 of the batch: timeout 00:00:00"),
        ({"timeouts": [timedelta(seconds=-5), None, None]}, "23514", "row 1 of the batch: timeout -1 days +23:59:55"),
        ({"concurrency_keys": [None, None, ""]}, "23514", "row 3 of the batch: concurrency_key ''"),
        ({"concurrency_keys": ["k" * 201, None, None]}, "23514", "row 1 of the batch: concurrency_key 'kkk"),
    ],
)
def test_every_batch_error_names_the_row_and_the_value(
    conn: Conn, arrays: dict[str, list[Any]], sqlstate: str, shown: str
) -> None:
    with refused(sqlstate) as info:
        enqueue_many(conn, ["t", "t", "t"], **arrays)
    assert shown in str(info.value)
    assert nothing_enqueued(conn)


def test_a_null_task_names_its_row(conn: Conn) -> None:
    with refused("23502") as info:
        enqueue_many(conn, ["t", "t", None])
    assert 'row 3 of the batch: column "task" may not be NULL' in str(info.value)


@pytest.mark.parametrize("keyed", [False, True], ids=["no-idempotency-keys", "idempotency-keys"])
def test_timeouts_and_concurrency_keys_are_set_per_job(conn: Conn, keyed: bool) -> None:
    ids = enqueue_many(
        conn,
        ["t", "t", "t"],
        timeouts=[timedelta(seconds=30), None, timedelta(minutes=2)],
        concurrency_keys=[None, "customer:42", "customer:7"],
        idempotency_keys=["a", "b", None] if keyed else None,
    )
    rows = [job(conn, i) for i in ids]
    assert [(r["timeout"], r["concurrency_key"]) for r in rows] == [  # type: ignore[index]
        (timedelta(seconds=30), None),
        (None, "customer:42"),
        (timedelta(minutes=2), "customer:7"),
    ]


def test_labels_are_set_per_job(conn: Conn) -> None:
    ids = enqueue_many(conn, ["t", "t", "t"], labels=[["gpu", "eu"], None, []], idempotency_keys=["a", None, None])
    assert [job(conn, i)["labels"] for i in ids] == [["gpu", "eu"], [], []]  # type: ignore[index]
    ids = enqueue_many(conn, ["t", "t"], labels=[["x"], ["y", "z"]])
    assert [job(conn, i)["labels"] for i in ids] == [["x"], ["y", "z"]]  # type: ignore[index]


def test_a_repeated_key_with_other_args_refuses_the_batch(conn: Conn) -> None:
    held = enqueue(conn, "t", {"n": 1}, idempotency_key="held")
    with refused("PS422") as info:
        enqueue_many(conn, ["t", "t", "t"], args=[{}, {}, {"n": 2}], idempotency_keys=["new", None, "held"])
    assert f"row 3 of the batch: idempotency_key 'held' is held by job {held}" in str(info.value)
    assert count(conn) == 1
    assert count(conn, "idempotency_keys") == 1


def test_a_key_repeated_within_the_batch_with_other_args_refuses_the_batch(conn: Conn) -> None:
    with refused("PS422") as info:
        enqueue_many(conn, ["t", "t", "u"], idempotency_keys=["a", None, "a"])
    assert "row 3 of the batch: idempotency_key 'a'" in str(info.value)
    assert "task 't', not 'u'" in str(info.value)
    assert nothing_enqueued(conn)


def test_an_empty_batch_returns_nothing(conn: Conn) -> None:
    assert enqueue_many(conn, []) == []
    assert nothing_enqueued(conn)


def test_a_batch_wakes_each_queue_once(conn: Conn, listener: Listener) -> None:
    enqueue_many(conn, ["t"] * 100, queues=["a"] * 60 + ["b"] * 40)
    assert sorted(listener.payloads(2)) == ["a", "b"]
