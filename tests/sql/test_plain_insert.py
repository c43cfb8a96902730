"""INSERT INTO pgsched.jobs from any language: defaults, validation and wake-up come from the database."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.sql.conftest import Listener
from tests.sql.helpers import Conn, claim_one, count, enqueue, job, nothing_enqueued, refused, register_tasks


def test_insert_with_only_task_and_args(conn: Conn, now: datetime) -> None:
    cur = conn.execute("""INSERT INTO pgsched.jobs (task, args) VALUES ('send', '{"to": 1}')""")
    assert cur.rowcount == 1
    row = conn.execute("SELECT * FROM pgsched.jobs").fetchone()
    assert row is not None
    assert row["task"] == "send"
    assert row["args"] == {"to": 1}
    assert row["queue"] == "default"
    assert row["state"] == "available"
    assert row["attempt"] == 0
    assert row["max_attempts"] == 5
    assert row["run_at"] >= now
    assert 0 <= row["shard"] < 8
    got = claim_one(conn)
    assert got["id"] == row["id"]
    assert got["args"] == {"to": 1}


def test_insert_returning_id_and_the_id_sequence_is_shared_with_enqueue(conn: Conn) -> None:
    inserted = conn.execute("INSERT INTO pgsched.jobs (task, args) VALUES ('t', '{}') RETURNING id").fetchone()
    assert inserted is not None
    assert enqueue(conn) > inserted["id"]


def test_a_sessions_inserts_of_one_second_share_a_shard_as_its_enqueues_do(conn: Conn) -> None:
    conn.execute("INSERT INTO pgsched.jobs (task, args) SELECT 't', '{}' FROM generate_series(1, 200)")
    enqueue(conn)
    shards = {r["shard"] for r in conn.execute("SELECT DISTINCT shard FROM pgsched.jobs").fetchall()}
    home = conn.execute("SELECT pgsched._home_shard(8) AS s").fetchone()
    assert home is not None
    assert shards == {home["s"]}  # one transaction: one second, one session


def test_insert_with_a_future_run_at_is_scheduled(conn: Conn, now: datetime) -> None:
    conn.execute(
        "INSERT INTO pgsched.jobs (task, args, queue, run_at) VALUES ('t', '{}', 'mail', %s)",
        [now + timedelta(minutes=5)],
    )
    row = conn.execute("SELECT state, queue FROM pgsched.jobs").fetchone()
    assert row == {"state": "scheduled", "queue": "mail"}


def test_insert_cannot_forge_lifecycle_columns(conn: Conn) -> None:
    # (attempt is the owner's mark for a row its enqueue functions checked already: a row that names it skips
    # the trigger, and no role but the owner may name it, see tests/security/test_inserts.py)
    conn.execute(
        """INSERT INTO pgsched.jobs (task, args, state, lease_token, leased_by, lease_expires_at,
                                     started_at, cancel_requested_at, last_error)
           VALUES ('t', '{}', 'running', 999999, 'intruder', now() + interval '1 day', now(), now(), 'x')"""
    )
    row = conn.execute("SELECT * FROM pgsched.jobs").fetchone()
    assert row is not None
    assert row["state"] == "available"
    assert row["attempt"] == 0
    assert row["lease_token"] is None
    assert row["leased_by"] is None
    assert row["lease_expires_at"] is None
    assert row["started_at"] is None
    assert row["cancel_requested_at"] is None
    assert row["last_error"] is None
    claimed = claim_one(conn)
    assert claimed["attempt"] == 1
    assert claimed["lease_token"] != 999999


def test_insert_takes_max_attempts_from_the_task_policy(conn: Conn) -> None:
    register_tasks(conn, [{"name": "flaky", "max_attempts": 3}])
    conn.execute("INSERT INTO pgsched.jobs (task, args) VALUES ('flaky', '{}'), ('other', '{}')")
    rows = conn.execute("SELECT task, max_attempts FROM pgsched.jobs ORDER BY task").fetchall()
    assert rows == [{"task": "flaky", "max_attempts": 3}, {"task": "other", "max_attempts": 5}]


@pytest.mark.parametrize(
    ("columns", "values", "sqlstate", "constraint"),
    [
        pytest.param("task, args", "'t', '[1]'", "23514", "jobs_args_is_object", id="args-array"),
        pytest.param("task, args, queue", "'t', '{}', ''", "23514", "jobs_queue_valid", id="queue-empty"),
        pytest.param("task, args, queue", "'t', '{}', 'a/b'", "23514", "jobs_queue_valid", id="queue-slash"),
        pytest.param(
            "task, args, max_attempts", "'t', '{}', 0", "23514", "jobs_max_attempts_positive", id="max-attempts-zero"
        ),
        pytest.param(
            "task, args, run_at", "'t', '{}', 'infinity'", "23514", "jobs_run_at_finite", id="run-at-infinity"
        ),
        pytest.param(
            "task, args, idempotency_key",
            "'t', '{}', repeat('k', 3000)",
            "23514",
            "jobs_idempotency_key_length",
            id="key-too-long",
        ),
        pytest.param(
            "task, args",
            """'t', jsonb_build_object('b', repeat('x', 1048576))""",
            "23514",
            "jobs_args_size_limit",
            id="payload-too-big",
        ),
        pytest.param("task, args, labels", "'t', '{}', '{\"\"}'", "23514", "jobs_labels_valid", id="label-empty"),
        pytest.param("task, args", "NULL, '{}'", "23502", None, id="task-null"),
        pytest.param("task, args", "'t', NULL", "23502", None, id="args-null"),
    ],
)
def test_bad_rows_are_refused_by_name_and_leave_nothing(
    conn: Conn, columns: str, values: str, sqlstate: str, constraint: str | None
) -> None:
    with refused(sqlstate, constraint) as info:
        conn.execute(f"INSERT INTO pgsched.jobs ({columns}) VALUES ({values})")
    if constraint is None:
        assert info.value.diag.column_name in ("task", "args")
    assert info.value.diag.column_name is not None
    assert "jobs_s" not in str(info.value)  # the rule and the value, not a partition
    assert nothing_enqueued(conn)


def test_a_refused_insert_names_the_column_and_the_value(conn: Conn) -> None:
    with refused("23514", "jobs_priority_range") as info:
        conn.execute("INSERT INTO pgsched.jobs (task, args, priority) VALUES ('t', '{}', 5000000)")
    assert info.value.diag.column_name == "priority"
    assert info.value.diag.table_name == "jobs"
    assert "priority 5000000 is out of range" in str(info.value)
    with refused("23514", "jobs_queue_valid") as info:
        conn.execute("INSERT INTO pgsched.jobs (task, args, queue) VALUES ('t', '{}', 'a/b')")
    assert "queue 'a/b'" in str(info.value)
    assert nothing_enqueued(conn)


def test_one_bad_row_refuses_the_whole_statement(conn: Conn) -> None:
    with refused("23514", "jobs_queue_valid"):
        conn.execute(
            "INSERT INTO pgsched.jobs (task, args, queue, idempotency_key) "
            "VALUES ('t', '{}', 'ok', 'k1'), ('t', '{}', 'not ok', 'k2')"
        )
    assert nothing_enqueued(conn)


def test_a_shard_outside_the_install_is_refused(conn: Conn) -> None:
    with refused("23514"):
        conn.execute("INSERT INTO pgsched.jobs (task, args, shard) VALUES ('t', '{}', 8)")
    assert nothing_enqueued(conn)


def test_insert_with_a_taken_idempotency_key_inserts_nothing(conn: Conn) -> None:
    first = enqueue(conn, "t", {"n": 1}, idempotency_key="k")
    cur = conn.execute(
        """INSERT INTO pgsched.jobs (task, args, idempotency_key, queue) VALUES ('t', '{"n": 1}', 'k', 'other')"""
    )
    assert cur.rowcount == 0
    assert count(conn) == 1
    row = job(conn, first)
    assert row is not None
    assert (row["args"], row["queue"]) == ({"n": 1}, "default")


def test_insert_with_a_taken_key_and_other_args_is_a_conflict(conn: Conn) -> None:
    first = enqueue(conn, "t", {"n": 1}, idempotency_key="k")
    with refused("PS422") as info:
        conn.execute("""INSERT INTO pgsched.jobs (task, args, idempotency_key) VALUES ('t', '{"n": 2}', 'k')""")
    assert f"held by job {first}" in str(info.value)
    assert count(conn) == 1


def test_insert_repeating_a_key_in_one_statement_keeps_the_first_row(conn: Conn) -> None:
    cur = conn.execute(
        """INSERT INTO pgsched.jobs (task, args, idempotency_key)
           VALUES ('t', '{"n": 1}', 'k'), ('t', '{"n": 1}', 'k')"""
    )
    assert cur.rowcount == 1
    assert [r["args"] for r in conn.execute("SELECT args FROM pgsched.jobs").fetchall()] == [{"n": 1}]


def test_insert_wakes_listeners_of_the_queue(conn: Conn, listener: Listener) -> None:
    conn.execute("INSERT INTO pgsched.jobs (task, args, queue) VALUES ('t', '{}', 'mail')")
    assert listener.payloads(1) == ["mail"]


def test_scheduled_insert_wakes_the_scanner_not_the_workers(conn: Conn, listener: Listener, now: datetime) -> None:
    conn.execute(
        "INSERT INTO pgsched.jobs (task, args, queue, run_at) VALUES ('t', '{}', 'mail', %s)",
        [now + timedelta(hours=1)],
    )
    assert listener.drain(1) == [("pgsched_scheduled", "")]
