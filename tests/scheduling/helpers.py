"""Driving schedules through the database the way a scanner does, with time passed as p_now."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest

from pgsched.runtime.scanner import plan_occurrences

Conn = psycopg.Connection[dict[str, Any]]
Row = dict[str, Any]
T = TypeVar("T")

SCANNER = "test-scanner"
LEASE = timedelta(hours=1)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def wait_for(
    predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.01, what: str | Callable[[], str] = ""
) -> T:
    """Poll predicate until it returns something truthy; fail the test at the deadline, saying ``what`` (called
    then, if it is a function: the state it describes is the state at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout}s waiting for {said or predicate}")
        time.sleep(interval)


def add_schedule(conn: Conn, name: str, cron: str, tz: str = "UTC", **policies: Any) -> Row:
    """pgsched.upsert_schedule(name, cron, task 't.tick', timezone, **policies); the schedule's row."""
    named = "".join(f", {key} => %({key})s" for key in policies)
    conn.execute(
        f"SELECT pgsched.upsert_schedule(name => %(name)s, cron => %(cron)s, task => 't.tick',"
        f" timezone => %(tz)s{named})",
        {"name": name, "cron": cron, "tz": tz, **policies},
    )
    return schedule(conn, name)


def schedule(conn: Conn, name: str) -> Row:
    row = conn.execute("SELECT * FROM pgsched.schedules WHERE name = %s", [name]).fetchone()
    assert row is not None, f"no schedule {name}"
    return row


def acquire(conn: Conn, now: datetime, scanner: str = SCANNER, lease: timedelta = LEASE) -> dict[int, int]:
    """pgsched.acquire_shards at p_now: {shard: epoch} held by scanner afterwards."""
    rows = conn.execute(
        "SELECT shard, epoch FROM pgsched.acquire_shards(%s, %s, p_now => %s)", [scanner, lease, now]
    ).fetchall()
    return {int(r["shard"]): int(r["epoch"]) for r in rows}


def add_occurrences(
    conn: Conn,
    row: Row,
    plan: list[dict[str, Any]],
    start: datetime,
    until: datetime,
    now: datetime,
    *,
    epoch: int,
    scanner: str = SCANNER,
) -> int:
    value = conn.execute(
        "SELECT pgsched.add_occurrences(%s, %s, %s, %s, %s, %s, %s, %s, %s) AS n",
        [scanner, row["shard"], epoch, row["name"], row["version"], json.dumps(plan), start, until, now],
    ).fetchone()
    assert value is not None
    return int(value["n"])


def expand(
    conn: Conn,
    name: str,
    start: datetime,
    end: datetime,
    now: datetime | None = None,
    *,
    scanner: str = SCANNER,
    epochs: dict[int, int] | None = None,
) -> int:
    """One scanner expansion of schedule `name` over [start, end) decided at `now` (default: start).

    Takes the shards for `scanner` at `now` unless `epochs` are given. Returns the jobs created.
    """
    now = start if now is None else now
    held = epochs if epochs is not None else acquire(conn, now, scanner)
    row = schedule(conn, name)
    plan, until = plan_occurrences(row, start, end, now)
    assert until == end, "the window is larger than one expansion"
    return add_occurrences(conn, row, plan, start, until, now, epoch=held[row["shard"]], scanner=scanner)


def jobs(conn: Conn, name: str) -> list[Row]:
    """Every job of schedule `name`, active or finished, by run_at."""
    return conn.execute(
        "SELECT id, state::text AS state, run_at, idempotency_key, last_error AS error, 'jobs' AS tbl FROM pgsched.jobs"
        " WHERE schedule = %(n)s"
        " UNION ALL SELECT id, state::text, run_at, idempotency_key, error, 'job_history' FROM pgsched.job_history"
        " WHERE schedule = %(n)s ORDER BY run_at, id",
        {"n": name},
    ).fetchall()


def run_ats(conn: Conn, name: str) -> list[datetime]:
    """run_at of the schedule's jobs that are still active (not withdrawn, not cancelled)."""
    rows = conn.execute("SELECT run_at FROM pgsched.jobs WHERE schedule = %s ORDER BY run_at", [name]).fetchall()
    return [r["run_at"] for r in rows]


def occurrences(conn: Conn, name: str) -> list[Row]:
    return conn.execute(
        "SELECT fire_at, nominal, dst, decision, reason, job_id, version, decided_at"
        " FROM pgsched.schedule_occurrences WHERE schedule = %s ORDER BY fire_at",
        [name],
    ).fetchall()


def decisions(conn: Conn, name: str) -> dict[str, int]:
    """How many occurrences of `name` carry each decision."""
    rows = conn.execute(
        "SELECT decision, count(*) AS n FROM pgsched.schedule_occurrences WHERE schedule = %s GROUP BY decision",
        [name],
    ).fetchall()
    return {r["decision"]: int(r["n"]) for r in rows}


def key(name: str, fire_at: datetime) -> str:
    """The idempotency key of an occurrence: schedule and fire time in UTC."""
    return f"pgsched:schedule:{name}:{fire_at.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def promote(conn: Conn, now: datetime) -> int:
    value = conn.execute("SELECT pgsched.promote_due(%s) AS n", [now]).fetchone()
    assert value is not None
    return int(value["n"])


def db_now(conn: Conn) -> datetime:
    value = conn.execute("SELECT clock_timestamp() AS now").fetchone()
    assert value is not None
    return value["now"]  # type: ignore[no-any-return]
