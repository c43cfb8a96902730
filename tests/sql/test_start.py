"""pgsched.start(): records handler starts under the token, refuses jobs cancelled or lost since their claim.

Also pgsched.cancels_requested() (the poll without LISTEN), cancel()'s NOTIFY
to the worker, and what the views count as running and as claimed.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.sql.conftest import Listener
from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    complete,
    enqueue,
    expire_leases,
    fail,
    history,
    job,
    pair,
    reads_of_a_few_jobs,
    running_behind_empty_statistics,
    scalar,
)
from tests.sql.test_roles import MakeRole, connect, make_role  # noqa: F401


def start(conn: Conn, pairs: list[tuple[int, int]], *, now: datetime | None = None) -> dict[int, str]:
    rows = conn.execute(
        "SELECT * FROM pgsched.start(%s::bigint[], %s::bigint[], NULL, %s)",
        [[p[0] for p in pairs], [p[1] for p in pairs], now],
    ).fetchall()
    return {r["job_id"]: r["outcome"] for r in rows}


def test_claim_leaves_started_at_empty_until_start(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, run_at=now - timedelta(seconds=1))
    got = claim_one(conn, now=now)
    row = job(conn, job_id)
    assert row is not None
    assert (row["claimed_at"], row["started_at"]) == (now, None)
    later = now + timedelta(seconds=7)  # waited seven seconds for a slot
    assert start(conn, [pair(got)], now=later) == {job_id: "started"}
    assert job(conn, job_id)["started_at"] == later  # type: ignore[index]
    assert complete(conn, [pair(got)], now=later + timedelta(seconds=1)) == {job_id: True}
    [done] = history(conn, job_id)
    assert done["started_at"] - done["run_at"] == timedelta(seconds=8)  # the start lag counts the wait


def test_a_completion_without_start_records_the_claim_as_its_start(conn: Conn, now: datetime) -> None:
    """A worker written against the SQL API that never calls start() keeps the start lag it had."""
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    complete(conn, [pair(got)], now=now + timedelta(seconds=3))
    assert history(conn, job_id)[0]["started_at"] == now


def test_start_refuses_a_cancel_requested_job_and_fail_records_it_cancelled(conn: Conn, now: datetime) -> None:
    go, stop = enqueue(conn), enqueue(conn)
    [a, b] = claim(conn, 2, now=now)
    assert cancel(conn, stop, now=now) == "cancel_requested"
    assert start(conn, [pair(a), pair(b)], now=now) == {go: "started", stop: "cancel_requested"}
    assert job(conn, stop)["started_at"] is None  # type: ignore[index]
    token = b["lease_token"] if b["id"] == stop else a["lease_token"]
    assert fail(conn, stop, token, "cancelled before it started", now=now) == "cancelled"
    [row] = history(conn, stop)
    assert (row["state"], row["started_at"]) == ("cancelled", None)


def test_start_refuses_a_stale_token_and_a_finished_job(conn: Conn, now: datetime) -> None:
    taken, finished = enqueue(conn, max_attempts=3), enqueue(conn)
    got = {r["id"]: r for r in claim(conn, 2, now=now, lease=timedelta(seconds=5))}
    assert complete(conn, [pair(got[finished])], now=now) == {finished: True}
    assert expire_leases(conn, now=now + timedelta(seconds=6)) == 1
    again = claim_one(conn, worker="w2", now=now + timedelta(seconds=6))
    assert again["id"] == taken
    assert start(conn, [pair(got[taken]), pair(got[finished])], now=now) == {
        taken: "lease_lost",
        finished: "lease_lost",
    }
    assert job(conn, taken)["started_at"] is None  # type: ignore[index]
    assert start(conn, [pair(again)], now=now) == {taken: "started"}


def test_start_refuses_a_lease_that_ran_out_before_any_expiry(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now, lease=timedelta(seconds=5))
    assert start(conn, [pair(got)], now=now + timedelta(seconds=6)) == {job_id: "lease_lost"}
    assert job(conn, job_id)["started_at"] is None  # type: ignore[index]


def test_a_cancel_committed_while_start_waits_wins(conn: Conn, dsn: str, now: datetime) -> None:
    """cancel() holds the row; start() waits for it, then sees the request: the job does not start."""
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    with psycopg.connect(dsn, row_factory=dict_row) as canceller:
        assert cancel(canceller, job_id) == "cancel_requested"  # not committed yet: holds the row
        result: list[dict[int, str]] = []
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as starter:
            thread = threading.Thread(target=lambda: result.append(start(starter, [pair(got)])))
            thread.start()
            thread.join(0.5)
            assert thread.is_alive(), "start() did not wait for the cancel's lock"
            canceller.commit()
            thread.join(10)
    assert result == [{job_id: "cancel_requested"}]


def test_cancel_of_a_running_job_notifies_its_worker_with_the_id_only(
    conn: Conn, listener: Listener, now: datetime
) -> None:
    listener.conn.execute("LISTEN pgsched_cancel")
    waiting, running = enqueue(conn, queue="q1"), enqueue(conn, queue="q2")
    claim_one(conn, queues=["q2"], now=now)
    listener.drain()
    assert cancel(conn, waiting) == "cancelled"
    assert cancel(conn, running) == "cancel_requested"
    assert listener.payloads(1, channel="pgsched_cancel") == [str(running)]


def test_cancels_requested_lists_only_current_leases_with_a_request(conn: Conn, now: datetime) -> None:
    a, b, c = enqueue(conn), enqueue(conn), enqueue(conn)
    got = {r["id"]: r for r in claim(conn, 3, now=now)}
    cancel(conn, a)
    cancel(conn, c)
    pairs = [pair(got[a]), pair(got[b]), (c, got[c]["lease_token"] + 1000)]
    rows = conn.execute(
        "SELECT pgsched.cancels_requested(%s::bigint[], %s::bigint[]) AS id",
        [[p[0] for p in pairs], [p[1] for p in pairs]],
    ).fetchall()
    assert [r["id"] for r in rows] == [a]
    assert job(conn, a)["lease_expires_at"] == got[a]["lease_expires_at"]  # type: ignore[index]  # reads only


def test_views_count_claimed_jobs_apart_from_running_ones(conn: Conn, now: datetime) -> None:
    conn.execute("SELECT pgsched.register_worker('w1', 'h', 1, ARRAY['default'], '{}', 2, 'test')")
    ids = [enqueue(conn) for _ in range(5)]
    got = claim(conn, 5, now=now)
    assert start(conn, [pair(r) for r in got[:2]]) == {r["id"]: "started" for r in got[:2]}
    stats: dict[str, Any] = conn.execute("SELECT * FROM pgsched.queue_stats WHERE queue = 'default'").fetchone()  # type: ignore[assignment]
    assert (stats["running"], stats["claimed"], stats["available"]) == (2, 3, 0)
    live: dict[str, Any] = conn.execute("SELECT * FROM pgsched.workers_live WHERE name = 'w1'").fetchone()  # type: ignore[assignment]
    assert (live["running"], live["claimed"]) == (2, 3)
    assert len(ids) == scalar(conn, "SELECT count(*) FROM pgsched.jobs WHERE state = 'running'")


def test_only_the_worker_role_may_start_jobs_and_poll_cancels(
    conn: Conn,
    make_role: MakeRole,  # noqa: F811 (the fixture of test_roles)
    now: datetime,
) -> None:
    job_id = enqueue(conn)
    with connect(make_role("pgsched_enqueue")) as app:
        got = claim_one(conn, now=now)
        for statement in ("SELECT * FROM pgsched.start(%s, %s)", "SELECT * FROM pgsched.cancels_requested(%s, %s)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(statement, [[job_id], [got["lease_token"]]])
    assert job(conn, job_id)["started_at"] is None  # type: ignore[index]
    with connect(make_role("pgsched_worker")) as worker:
        assert start(worker, [pair(got)]) == {job_id: "started"}
        assert (
            worker.execute(
                "SELECT * FROM pgsched.cancels_requested(%s, %s)", [[job_id], [got["lease_token"]]]
            ).fetchall()
            == []
        )


def test_cancels_requested_probes_its_jobs_by_id_whatever_the_statistics_say(conn: Conn, now: datetime) -> None:
    """Workers without LISTEN call it several times a second: never a plan that reads every running row."""
    got = running_behind_empty_statistics(conn, now)
    ids, tokens = [r["id"] for r in got], [r["lease_token"] for r in got]
    reads_of_a_few_jobs(
        conn, lambda: conn.execute("SELECT pgsched.cancels_requested(%s::bigint[], %s::bigint[])", (ids, tokens))
    )
