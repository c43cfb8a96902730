"""Thin wrappers over pgsched's SQL functions for the contract tests: one call, one statement, rows as dicts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[dict[str, Any]]
Row = dict[str, Any]

LEASE = timedelta(seconds=30)
TERMINAL = ("completed", "dead", "cancelled")


def db_now(conn: Conn) -> datetime:
    """The database clock; tests move time forward from here through p_now."""
    row = conn.execute("SELECT pg_catalog.now() AS now").fetchone()
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]


def scalar(conn: Conn, query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def _named_call(function: str, fixed: dict[str, Any], named: dict[str, Any]) -> tuple[sql.Composed, dict[str, Any]]:
    args = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Placeholder(k)) for k in {**fixed, **named}]
    query = sql.SQL("SELECT * FROM pgsched.{}({})").format(sql.Identifier(function), sql.SQL(", ").join(args))
    return query, {**fixed, **named}


def enqueue(conn: Conn, task: str | None = "t", args: Any = None, **named: Any) -> int:
    """pgsched.enqueue(task, args, queue => …, run_at => …, …) with named arguments."""
    fixed = {"task": task} if args is None else {"task": task, "args": Jsonb(args)}
    query, params = _named_call("enqueue", fixed, named)
    return int(scalar(conn, query, params))


def enqueue_many(conn: Conn, tasks: Sequence[str | None], **arrays: Sequence[Any] | None) -> list[int]:
    """pgsched.enqueue_many(tasks, args => …, …): the returned ids, in input order."""
    casts = {
        "args": "jsonb[]",
        "queues": "text[]",
        "run_ats": "timestamptz[]",
        "priorities": "integer[]",
        "idempotency_keys": "text[]",
        "max_attempts": "integer[]",
        "tenants": "text[]",
        "labels": "jsonb[]",
        "depends_on": "jsonb[]",
        "on_dependency_failure": "text[]",
        "timeouts": "interval[]",
        "concurrency_keys": "text[]",
        "key_scopes": "text[]",
    }
    params: dict[str, Any] = {"tasks": list(tasks)}
    parts = [sql.SQL("tasks => %(tasks)s::text[]")]
    for name, values in arrays.items():
        if name in ("args", "labels", "depends_on") and values is not None:
            values = [None if v is None else Jsonb(v) for v in values]
        params[name] = None if values is None else list(values)
        parts.append(sql.SQL("{} => {}::" + casts[name]).format(sql.Identifier(name), sql.Placeholder(name)))
    query = sql.SQL("SELECT ord, job_id FROM pgsched.enqueue_many({}) ORDER BY ord").format(sql.SQL(", ").join(parts))
    rows = conn.execute(query, params).fetchall()
    assert [r["ord"] for r in rows] == list(range(1, len(rows) + 1))
    return [int(r["job_id"]) for r in rows]


def claim(
    conn: Conn,
    n: int = 10,
    *,
    worker: str = "w1",
    queues: Sequence[str] = ("default",),
    lease: timedelta = LEASE,
    labels: Sequence[str] = (),
    now: datetime | None = None,
    start_shard: int | None = 0,
) -> list[Row]:
    return conn.execute(
        "SELECT * FROM pgsched.claim(%s, %s::text[], %s, %s, %s::text[], %s, %s)",
        [worker, list(queues), n, lease, list(labels), start_shard, now],
    ).fetchall()


def claim_one(conn: Conn, **kw: Any) -> Row:
    rows = claim(conn, 1, **kw)
    assert len(rows) == 1, rows
    return rows[0]


def heartbeat(
    conn: Conn,
    pairs: Iterable[tuple[int, int]],
    *,
    lease: timedelta = LEASE,
    now: datetime | None = None,
    worker: str | None = None,
) -> dict[int, tuple[bool, bool]]:
    """{job_id: (held, cancel_requested)}."""
    ids, tokens = _split(pairs)
    rows = conn.execute(
        "SELECT * FROM pgsched.heartbeat(%s::bigint[], %s::bigint[], %s, %s, %s)",
        [ids, tokens, lease, worker, now],
    ).fetchall()
    return {r["job_id"]: (r["held"], r["cancel_requested"]) for r in rows}


def complete(
    conn: Conn,
    pairs: Iterable[tuple[int, int]],
    *,
    results: Sequence[Any] | None = None,
    now: datetime | None = None,
) -> dict[int, bool]:
    """{job_id: accepted}."""
    ids, tokens = _split(pairs)
    wrapped = None if results is None else [None if r is None else Jsonb(r) for r in results]
    rows = conn.execute(
        "SELECT * FROM pgsched.complete(%s::bigint[], %s::bigint[], %s::jsonb[], NULL, %s)",
        [ids, tokens, wrapped, now],
    ).fetchall()
    return {r["job_id"]: r["accepted"] for r in rows}


def fail(
    conn: Conn,
    job_id: int,
    token: int,
    error: str = "boom",
    *,
    retry_at: datetime | None = None,
    final: bool = False,
    now: datetime | None = None,
) -> str:
    return str(
        scalar(conn, "SELECT pgsched.fail(%s, %s, %s, %s, %s, %s)", [job_id, token, error, retry_at, final, now])
    )


def snooze(conn: Conn, job_id: int, token: int, run_at: datetime, *, now: datetime | None = None) -> str:
    return str(scalar(conn, "SELECT pgsched.snooze(%s, %s, %s, %s)", [job_id, token, run_at, now]))


def release(conn: Conn, pairs: Iterable[tuple[int, int]], *, now: datetime | None = None) -> list[Row]:
    ids, tokens = _split(pairs)
    return conn.execute("SELECT * FROM pgsched.release(%s::bigint[], %s::bigint[], %s)", [ids, tokens, now]).fetchall()


def cancel(conn: Conn, job_id: int, *, now: datetime | None = None) -> str:
    return str(scalar(conn, "SELECT pgsched.cancel(%s, %s)", [job_id, now]))


def retry(conn: Conn, job_id: int, *, now: datetime | None = None) -> str:
    return str(scalar(conn, "SELECT pgsched.retry(%s, %s)", [job_id, now]))


def expire_leases(conn: Conn, *, now: datetime | None = None, limit: int = 1000) -> int:
    return int(scalar(conn, "SELECT pgsched.expire_leases(%s, %s)", [now, limit]))


def promote_due(conn: Conn, *, now: datetime | None = None, limit: int = 10000) -> int:
    return int(scalar(conn, "SELECT pgsched.promote_due(%s, %s)", [now, limit]))


def maintain(conn: Conn, *, now: datetime | None = None) -> dict[str, Any]:
    return scalar(conn, "SELECT pgsched.maintain(%s)", [now])  # type: ignore[no-any-return]


def register_tasks(conn: Conn, tasks: list[dict[str, Any]]) -> int:
    return int(scalar(conn, "SELECT pgsched.register_tasks(%s)", [Jsonb(tasks)]))


def _split(pairs: Iterable[tuple[int, int]]) -> tuple[list[int], list[int]]:
    materialized = list(pairs)
    return [p[0] for p in materialized], [p[1] for p in materialized]


def pair(row: Row) -> tuple[int, int]:
    """(id, lease_token) of a claimed job."""
    return int(row["id"]), int(row["lease_token"])


# -- reading state ------------------------------------------------------


def job(conn: Conn, job_id: int) -> Row | None:
    """The active row of a job, or None when it is not in pgsched.jobs."""
    return conn.execute("SELECT * FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()


def history(conn: Conn, job_id: int) -> list[Row]:
    """The job's history rows, oldest first."""
    return conn.execute(
        "SELECT * FROM pgsched.job_history WHERE id = %s ORDER BY finished_at, lease_token NULLS FIRST", [job_id]
    ).fetchall()


def events(conn: Conn, job_id: int) -> list[Row]:
    """The job's timeline (recorded and derived transitions), in order."""
    return conn.execute(
        "SELECT kind, attempt, worker, token, detail, at FROM pgsched.job_timeline WHERE job_id = %s",
        [job_id],
    ).fetchall()


def event_kinds(conn: Conn, job_id: int) -> list[str]:
    return [e["kind"] for e in events(conn, job_id)]


def state(conn: Conn, job_id: int) -> str | None:
    """Where the job is now: its active state, else its latest history state, else None."""
    active = job(conn, job_id)
    if active is not None:
        return str(active["state"])
    rows = history(conn, job_id)
    return str(rows[-1]["state"]) if rows else None


def count(conn: Conn, table: str = "jobs") -> int:
    return int(scalar(conn, sql.SQL("SELECT count(*) FROM pgsched.{}").format(sql.Identifier(table))))


def snapshot(conn: Conn) -> dict[str, list[Row]]:
    """Everything a transition could touch, to compare before and after one that must change nothing."""
    return {
        "jobs": conn.execute("SELECT * FROM pgsched.jobs ORDER BY id").fetchall(),
        "history": conn.execute("SELECT * FROM pgsched.job_history ORDER BY id, finished_at").fetchall(),
        "events": conn.execute("SELECT * FROM pgsched.job_events ORDER BY seq").fetchall(),
        "keys": conn.execute("SELECT * FROM pgsched.idempotency_keys ORDER BY key").fetchall(),
    }


def nothing_enqueued(conn: Conn) -> bool:
    return count(conn, "jobs") == 0 and count(conn, "idempotency_keys") == 0


@contextmanager
def refused(sqlstate: str, constraint: str | None = None) -> Iterator[pytest.ExceptionInfo[psycopg.Error]]:
    """Expect the statement to fail with this SQLSTATE (and, when given, this constraint name)."""
    with pytest.raises(psycopg.Error) as info:
        yield info
    assert info.value.sqlstate == sqlstate, (info.value.sqlstate, str(info.value))
    if constraint is not None:
        assert info.value.diag.constraint_name == constraint, str(info.value)


# Reads of pgsched.jobs' partitions by this transaction so far (pg_stat_xact_user_tables): sequential scans, and
# rows fetched through an index. What a statement over a few jobs' ids reads, whatever the statistics say.
JOBS_READS = """
SELECT coalesce(sum(seq_scan), 0) AS seq, coalesce(sum(idx_tup_fetch), 0) AS fetched
FROM pg_stat_xact_user_tables WHERE schemaname = 'pgsched' AND relname LIKE 'jobs_s%'
"""


def running_behind_empty_statistics(conn: Conn, now: datetime) -> list[Row]:
    """Three of 2,000 running jobs, in partitions whose statistics (taken while they were empty) call them tiny:
    as after an ANALYZE while something pins the xmin horizon, when they hold hundreds of thousands of dead row
    versions that it does not count."""
    conn.execute("ANALYZE pgsched.jobs")
    enqueue_many(conn, ["t"] * 2000)
    return claim(conn, 2000, now=now)[:3]


def reads_of_a_few_jobs(conn: Conn, call: Callable[[], object], *, times: int = 7, most: int = 30) -> None:
    """Run call ``times`` times (past PL/pgSQL's first five custom plans: its generic plan too) in a transaction,
    and check that each call read pgsched.jobs' partitions through their primary keys only: no sequential scan,
    at most ``most`` rows fetched (see running_behind_empty_statistics)."""
    with conn.transaction():
        for _ in range(times):
            before = conn.execute(JOBS_READS).fetchone()
            call()
            after = conn.execute(JOBS_READS).fetchone()
            assert before is not None
            assert after is not None
            assert after["seq"] == before["seq"], "a sequential scan of pgsched.jobs"
            assert after["fetched"] - before["fetched"] <= most, (before, after)
