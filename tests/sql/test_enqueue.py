"""pgsched.enqueue(): defaults, validation with named constraints, and idempotency keys."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.sql.helpers import (
    Conn,
    claim_one,
    complete,
    count,
    enqueue,
    fail,
    job,
    maintain,
    nothing_enqueued,
    pair,
    refused,
    register_tasks,
    scalar,
)

CHECK = "23514"
NOT_NULL = "23502"
MB = 1048576


def test_enqueue_with_defaults_makes_a_due_job(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "send")
    row = job(conn, job_id)
    assert row is not None
    assert row["task"] == "send"
    assert row["args"] == {}
    assert row["queue"] == "default"
    assert row["state"] == "available"
    assert row["priority"] == 0
    assert row["attempt"] == 0
    assert row["max_attempts"] == 5  # pgsched.config.default_max_attempts
    assert row["run_at"] >= now
    assert row["lease_token"] is None
    assert row["leased_by"] is None
    assert 0 <= row["shard"] < 8


def test_enqueue_from_psql_with_named_arguments(conn: Conn) -> None:
    job_id = scalar(
        conn,
        """SELECT pgsched.enqueue('send', '{"to": 1}', queue => 'mail', run_at => now() + interval '5 minutes')""",
    )
    row = job(conn, job_id)
    assert row is not None
    assert (row["task"], row["args"], row["queue"], row["state"]) == ("send", {"to": 1}, "mail", "scheduled")
    assert row["run_at"] - row["created_at"] == timedelta(minutes=5)


def test_enqueue_stores_every_option(conn: Conn, now: datetime) -> None:
    run_at = now + timedelta(hours=2)
    job_id = enqueue(
        conn,
        "report",
        {"day": "2026-01-01"},
        queue="reports.daily",
        run_at=run_at,
        priority=7,
        idempotency_key="report:2026-01-01",
        max_attempts=9,
        labels=["gpu", "eu"],
        tenant="acme",
    )
    row = job(conn, job_id)
    assert row is not None
    assert row["args"] == {"day": "2026-01-01"}
    assert row["queue"] == "reports.daily"
    assert row["run_at"] == run_at
    assert row["state"] == "scheduled"
    assert row["priority"] == 7
    assert row["idempotency_key"] == "report:2026-01-01"
    assert row["max_attempts"] == 9
    assert row["labels"] == ["gpu", "eu"]
    assert row["tenant"] == "acme"


def test_ids_grow(conn: Conn) -> None:
    ids = [enqueue(conn) for _ in range(5)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5


def test_max_attempts_comes_from_the_task_policy_unless_given(conn: Conn) -> None:
    register_tasks(conn, [{"name": "flaky", "max_attempts": 12}])
    from_policy = job(conn, enqueue(conn, "flaky"))
    explicit = job(conn, enqueue(conn, "flaky", max_attempts=2))
    other_task = job(conn, enqueue(conn, "steady"))
    assert from_policy is not None
    assert explicit is not None
    assert other_task is not None
    assert from_policy["max_attempts"] == 12
    assert explicit["max_attempts"] == 2
    assert other_task["max_attempts"] == 5


BAD_INPUT: list[Any] = [
    pytest.param({"args": [1, 2]}, CHECK, "jobs_args_is_object", id="args-array"),
    pytest.param({"args": "text"}, CHECK, "jobs_args_is_object", id="args-string"),
    pytest.param({"queue": ""}, CHECK, "jobs_queue_valid", id="queue-empty"),
    pytest.param({"queue": "no spaces"}, CHECK, "jobs_queue_valid", id="queue-space"),
    pytest.param({"queue": "-dash-first"}, CHECK, "jobs_queue_valid", id="queue-leading-dash"),
    pytest.param({"queue": "q" * 64}, CHECK, "jobs_queue_valid", id="queue-too-long"),
    pytest.param({"max_attempts": 0}, CHECK, "jobs_max_attempts_positive", id="max-attempts-zero"),
    pytest.param({"max_attempts": -3}, CHECK, "jobs_max_attempts_positive", id="max-attempts-negative"),
    pytest.param({"run_at": "infinity"}, CHECK, "jobs_run_at_finite", id="run-at-infinity"),
    pytest.param({"run_at": "-infinity"}, CHECK, "jobs_run_at_finite", id="run-at-minus-infinity"),
    pytest.param({"idempotency_key": "k" * 1001}, CHECK, "jobs_idempotency_key_length", id="key-too-long"),
    pytest.param({"idempotency_key": "k" * 3000}, CHECK, "jobs_idempotency_key_length", id="key-over-btree-limit"),
    pytest.param({"idempotency_key": "é" * 501}, CHECK, "jobs_idempotency_key_length", id="key-1002-bytes"),
    pytest.param({"idempotency_key": ""}, CHECK, "jobs_idempotency_key_length", id="key-empty"),
    pytest.param({"task": ""}, CHECK, "jobs_task_valid", id="task-empty"),
    pytest.param({"task": "send mail"}, CHECK, "jobs_task_valid", id="task-space"),
    pytest.param({"priority": 1_000_001}, CHECK, "jobs_priority_range", id="priority-too-high"),
    pytest.param({"labels": ["gpu", None]}, CHECK, "jobs_labels_valid", id="label-null"),
    pytest.param({"labels": [""]}, CHECK, "jobs_labels_valid", id="label-empty"),
    pytest.param({"labels": ["gpu", ""]}, CHECK, "jobs_labels_valid", id="label-empty-among-others"),
    pytest.param({"tenant": ""}, CHECK, "jobs_tenant_length", id="tenant-empty"),
]


@pytest.mark.parametrize(("options", "sqlstate", "constraint"), BAD_INPUT)
def test_bad_input_is_refused_by_a_named_constraint(
    conn: Conn, options: dict[str, Any], sqlstate: str, constraint: str
) -> None:
    options = {"task": "send", **options}
    with refused(sqlstate, constraint) as info:
        enqueue(conn, **options)
    assert constraint in str(info.value)  # the message names it too
    assert info.value.diag.schema_name == "pgsched"
    column = next(k for k in options if k != "task") if len(options) > 1 else "task"
    assert info.value.diag.column_name == column
    assert column in str(info.value)
    assert nothing_enqueued(conn)


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ({"queue": "no spaces"}, "queue 'no spaces'"),
        ({"priority": 5_000_000}, "priority 5000000"),
        ({"max_attempts": 0}, "max_attempts 0"),
        ({"labels": ["gpu", ""]}, """labels '{gpu,""}'"""),
        ({"idempotency_key": "k" * 3000}, "is 3000 bytes long"),
        ({"tenant": ""}, "tenant ''"),
    ],
)
def test_a_refusal_names_the_value_that_is_wrong(conn: Conn, options: dict[str, Any], shown: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        enqueue(conn, "send", **options)
    assert shown in str(info.value)
    assert "jobs_s" not in str(info.value)  # never a partition's name


def test_a_key_of_1000_bytes_is_accepted(conn: Conn) -> None:
    key = "é" * 500  # 1000 bytes in UTF-8
    row = job(conn, enqueue(conn, "send", idempotency_key=key))
    assert row is not None
    assert row["idempotency_key"] == key


def test_null_task_is_refused_naming_the_column(conn: Conn) -> None:
    with refused(NOT_NULL) as info:
        enqueue(conn, None)
    assert info.value.diag.column_name == "task"
    assert '"task"' in str(info.value)
    assert nothing_enqueued(conn)


def test_oversized_payload_is_refused_with_a_hint(conn: Conn) -> None:
    with refused(CHECK, "jobs_args_size_limit") as info:
        enqueue(conn, "send", {"blob": "x" * MB})
    assert "1048576" in str(info.value)
    assert info.value.diag.message_hint is not None
    assert "max_payload_bytes" in info.value.diag.message_hint
    assert nothing_enqueued(conn)


def _compact_size(args: Any) -> int:
    return len(json.dumps(args, separators=(",", ":"), ensure_ascii=False).encode())


def _args_of_size(size: int) -> dict[str, Any]:
    """Args whose compact JSON text is exactly size bytes, with nesting, spaces, escapes and non-ASCII."""
    base: dict[str, Any] = {"list": [1, 2.5, None, True, {"k": "a, b: c"}], "quote": 'say "hi", \\ ok', "é": "ü"}
    base["blob"] = ""
    base["blob"] = "x" * (size - _compact_size(base))
    assert _compact_size(base) == size
    return base


def test_default_payload_limit_is_one_megabyte_of_compact_json_text(conn: Conn) -> None:
    enqueue(conn, "send", _args_of_size(MB))
    enqueue(conn, "send", {"blob": "x" * (MB - len('{"blob":""}'))})
    with refused(CHECK, "jobs_args_size_limit") as info:
        enqueue(conn, "send", _args_of_size(MB + 1))
    assert f"args are {MB + 1} bytes" in str(info.value)
    with refused(CHECK, "jobs_args_size_limit"):
        enqueue(conn, "send", {"blob": "x" * (MB + 1 - len('{"blob":""}'))})
    assert count(conn) == 2


def test_plain_insert_measures_the_payload_alike(conn: Conn) -> None:
    conn.execute("INSERT INTO pgsched.jobs (task, args) VALUES ('t', %s)", [Jsonb(_args_of_size(MB))])
    with refused(CHECK, "jobs_args_size_limit"):
        conn.execute("INSERT INTO pgsched.jobs (task, args) VALUES ('t', %s)", [Jsonb(_args_of_size(MB + 1))])
    assert count(conn) == 1


def test_payload_limit_is_configurable(conn: Conn) -> None:
    conn.execute("UPDATE pgsched.config SET max_payload_bytes = 100")
    enqueue(conn, "send", _args_of_size(100))
    with refused(CHECK, "jobs_args_size_limit"):
        enqueue(conn, "send", _args_of_size(101))
    assert count(conn) == 1


def test_a_refused_enqueue_with_a_key_leaves_the_key_free(conn: Conn) -> None:
    with refused(CHECK, "jobs_args_is_object"):
        enqueue(conn, "send", [1], idempotency_key="k1")
    assert nothing_enqueued(conn)
    job_id = enqueue(conn, "send", {"ok": True}, idempotency_key="k1")
    row = job(conn, job_id)
    assert row is not None
    assert row["args"] == {"ok": True}


# -- idempotency keys ---------------------------------------------------


def test_repeated_key_returns_the_active_job_and_adds_nothing(conn: Conn) -> None:
    first = enqueue(conn, "send", {"n": 1}, idempotency_key="order-42")
    again = enqueue(conn, "send", {"n": 1}, idempotency_key="order-42", queue="other", priority=5)
    assert again == first
    assert count(conn) == 1
    row = job(conn, first)
    assert row is not None
    assert (row["args"], row["queue"], row["priority"]) == ({"n": 1}, "default", 0)  # the first one's options stand


@pytest.mark.parametrize(
    ("task", "args", "named"),
    [("send", {"n": 2}, "other args"), ("other.task", {"n": 1}, "task 'send', not 'other.task'")],
)
def test_repeated_key_with_other_work_is_a_conflict(conn: Conn, task: str, args: dict[str, Any], named: str) -> None:
    first = enqueue(conn, "send", {"n": 1}, idempotency_key="order-42")
    with refused("PS422") as info:
        enqueue(conn, task, args, idempotency_key="order-42")
    assert f"idempotency_key 'order-42' is held by job {first}" in str(info.value)
    assert named in str(info.value)
    assert info.value.diag.column_name == "idempotency_key"
    assert count(conn) == 1


def test_repeated_key_of_a_finished_job_with_other_args_is_a_conflict(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, "send", {"n": 1}, idempotency_key="k")
    assert complete(conn, [pair(claim_one(conn, now=now))], now=now) == {first: True}
    assert enqueue(conn, "send", {"n": 1}, idempotency_key="k") == first
    with refused("PS422"):
        enqueue(conn, "send", {"n": 2}, idempotency_key="k")
    assert count(conn) == 0


def test_repeated_key_returns_the_running_job(conn: Conn) -> None:
    first = enqueue(conn, idempotency_key="k")
    claim_one(conn)
    assert enqueue(conn, idempotency_key="k") == first
    assert count(conn) == 1


def test_different_keys_make_different_jobs(conn: Conn) -> None:
    assert enqueue(conn, idempotency_key="a") != enqueue(conn, idempotency_key="b")
    assert count(conn) == 2


def test_repeated_key_returns_a_finished_job_within_the_retention(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, idempotency_key="k")
    assert complete(conn, [pair(claim_one(conn, now=now))], now=now) == {first: True}
    assert enqueue(conn, idempotency_key="k") == first
    assert count(conn) == 0
    expires = scalar(conn, "SELECT expires_at FROM pgsched.idempotency_keys WHERE key = 'k'")
    assert expires == now + timedelta(days=14)  # pgsched.config.idempotency_retention


@pytest.mark.parametrize("outcome", ["dead", "cancelled"])
def test_repeated_key_returns_a_dead_or_cancelled_job_within_the_retention(conn: Conn, outcome: str) -> None:
    first = enqueue(conn, idempotency_key="k", max_attempts=1)
    if outcome == "dead":
        assert fail(conn, *pair(claim_one(conn))) == "dead"
    else:
        assert scalar(conn, "SELECT pgsched.cancel(%s)", [first]) == "cancelled"
    assert enqueue(conn, idempotency_key="k") == first
    assert count(conn) == 0


def test_key_is_free_again_after_the_retention_ran_out(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, idempotency_key="k")
    long_ago = now - timedelta(days=15)
    complete(conn, [pair(claim_one(conn, now=long_ago))], now=long_ago)  # expired a day ago
    second = enqueue(conn, idempotency_key="k")
    assert second != first
    assert job(conn, second) is not None
    assert scalar(conn, "SELECT job_id FROM pgsched.idempotency_keys WHERE key = 'k'") == second
    assert enqueue(conn, idempotency_key="k") == second


def test_key_is_free_again_after_maintain_pruned_it(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, idempotency_key="k")
    complete(conn, [pair(claim_one(conn, now=now))], now=now)
    assert maintain(conn, now=now + timedelta(days=13))["idempotency_keys_pruned"] == 0
    assert enqueue(conn, idempotency_key="k") == first
    assert maintain(conn, now=now + timedelta(days=14, seconds=1))["idempotency_keys_pruned"] == 1
    second = enqueue(conn, idempotency_key="k")
    assert second != first
    assert count(conn) == 1


def test_a_key_always_lands_on_the_same_shard(conn: Conn, now: datetime) -> None:
    shards = set()
    for _ in range(3):
        job_id = enqueue(conn, idempotency_key="stable")
        row = job(conn, job_id)
        assert row is not None
        shards.add(row["shard"])
        long_ago = now - timedelta(days=30)
        complete(conn, [pair(claim_one(conn, now=long_ago))], now=long_ago)
    assert len(shards) == 1


def test_enqueue_in_a_transaction_rolls_back_with_it(dsn: str, conn: Conn) -> None:
    import psycopg

    with psycopg.connect(dsn) as other:
        other.execute("SELECT pgsched.enqueue('t', idempotency_key => 'tx')")
        other.rollback()
    assert nothing_enqueued(conn)
    assert enqueue(conn, idempotency_key="tx") > 0
