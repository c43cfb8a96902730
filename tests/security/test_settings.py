"""Issue 8.5 and 8.7: install-time settings stay fixed and valid; values that overflow later are refused now."""

from __future__ import annotations

from datetime import timedelta

import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from tests.security.conftest import Deployment, everything
from tests.sql.helpers import (
    Conn,
    claim,
    db_now,
    enqueue,
    enqueue_many,
    pair,
    refused,
    release,
    scalar,
    snooze,
)

CHECK = "23514"


@pytest.mark.parametrize("who", ["admin", "owner"])
def test_the_shard_count_is_fixed(deployment: Deployment, owner: Conn, who: str) -> None:
    before = everything(owner)
    conn = deployment.login("pgsched_admin") if who == "admin" else owner
    with refused("0A000"):
        conn.execute("UPDATE pgsched.config SET shards = 16")
    with refused("0A000"):
        conn.execute("UPDATE pgsched.config SET shards = shards, audit = false, singleton = false")
    assert everything(owner) == before
    for _ in range(16):
        enqueue(conn)  # every shard still has its partition


@pytest.mark.parametrize(
    ("setting", "constraint"),
    [
        ("max_payload_bytes = 0", "config_max_payload_positive"),
        ("max_payload_bytes = 2147483647", "config_max_payload_range"),
        ("default_max_attempts = 0", "config_default_max_attempts_positive"),
        ("default_max_attempts = 2147483647", "config_default_max_attempts_range"),
        ("backoff_base = '0'", "config_backoff_order"),
        ("backoff_max = '1000 years'", "config_backoff_max_range"),
        ("backoff_jitter = 'NaN'", "config_backoff_jitter_range"),
        ("history_retention = '-1 day'", "config_retention_range"),
        ("events_retention = '-1 day'", "config_retention_range"),
        ("idempotency_retention = '1000 years'", "config_retention_range"),
        ("partitions_ahead = 0", "config_partitions_ahead_range"),
        ("command_timeout_margin = '1 second'", "config_command_timeout_margin_range"),
        ("unserved_task_timeout = '0'", "config_unserved_task_timeout_range"),
        ("unserved_task_timeout = '1000 years'", "config_unserved_task_timeout_range"),
    ],
)
def test_every_setting_is_validated(deployment: Deployment, owner: Conn, setting: str, constraint: str) -> None:
    before = everything(owner)
    admin = deployment.login("pgsched_admin")
    with refused(CHECK, constraint):
        admin.execute(sql.SQL("UPDATE pgsched.config SET {}").format(sql.SQL(setting)))  # type: ignore[arg-type]
    assert everything(owner) == before


def test_valid_settings_are_accepted(deployment: Deployment, owner: Conn) -> None:
    admin = deployment.login("pgsched_admin")
    admin.execute("UPDATE pgsched.config SET history_retention = '30 days', max_payload_bytes = 4096, audit = false")
    assert scalar(owner, "SELECT max_payload_bytes FROM pgsched.config") == 4096


BIG = 2147483647


@pytest.mark.parametrize(
    ("attempt", "constraint"),
    [
        ("SELECT pgsched.enqueue('t', max_attempts => 2147483647)", "jobs_max_attempts_range"),
        (
            "SELECT * FROM pgsched.enqueue_many(ARRAY['t', 't'], max_attempts => ARRAY[1, 2147483647])",
            "jobs_max_attempts_range",
        ),
        (
            "INSERT INTO pgsched.jobs (task, args, max_attempts) VALUES ('t', '{}', 2147483647)",
            "jobs_max_attempts_range",
        ),
        ("SELECT pgsched.enqueue('t', priority => 2147483647)", "jobs_priority_range"),
        ("INSERT INTO pgsched.jobs (task, args, priority) VALUES ('t', '{}', -2147483648)", "jobs_priority_range"),
    ],
)
def test_values_that_overflow_later_are_refused_at_enqueue(
    deployment: Deployment, owner: Conn, attempt: str, constraint: str
) -> None:
    before = everything(owner)
    app = deployment.login("pgsched_enqueue")
    with refused(CHECK, constraint):
        app.execute(attempt)
    assert everything(owner) == before


def test_task_and_schedule_policies_are_bounded_too(deployment: Deployment, owner: Conn) -> None:
    before = everything(owner)
    worker = deployment.login("pgsched_worker")
    with refused(CHECK, "tasks_max_attempts_range"):
        worker.execute("SELECT pgsched.register_tasks(%s)", [Jsonb([{"name": "t", "max_attempts": BIG}])])
    admin = deployment.login("pgsched_admin")
    with refused(CHECK, "schedules_max_attempts_range"):
        admin.execute("SELECT pgsched.upsert_schedule('s', '* * * * *', 't', max_attempts => %s)", [BIG])
    assert everything(owner) == before


def test_a_job_at_the_bound_is_handed_back_with_its_batch(deployment: Deployment, owner: Conn) -> None:
    worker = deployment.login("pgsched_worker")
    ids = enqueue_many(owner, ["t"] * 3, max_attempts=[1, 1000000, 5])
    got = claim(worker, 3, start_shard=None)
    assert sorted(r["id"] for r in got) == sorted(ids)
    # release, claim and snooze the biggest one over and over: it stays at the bound, never overflows
    outcomes = release(worker, [pair(r) for r in got])
    assert {r["outcome"] for r in outcomes} == {"available"}
    big = ids[1]
    for _ in range(3):
        rows = claim(worker, 3, start_shard=None)
        lease = next(r for r in rows if r["id"] == big)
        assert snooze(worker, *pair(lease), db_now(owner) - timedelta(seconds=1)) == "available"
        release(worker, [pair(r) for r in rows if r["id"] != big])
    assert scalar(owner, "SELECT max_attempts FROM pgsched.jobs WHERE id = %s", [big]) == 1000000
    assert scalar(owner, "SELECT count(*) FROM pgsched.jobs") == 3
