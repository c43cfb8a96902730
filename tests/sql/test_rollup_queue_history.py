"""pgsched.rollup_queue_history() and the view pgsched.queue_history: per-minute, per-queue rollup, idempotent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    complete,
    enqueue,
    fail,
    maintain,
    pair,
    promote_due,
    refused,
    retry,
    scalar,
)
from tests.sql.test_roles import DENIED, MakeRole, connect, make_role  # noqa: F401 (make_role is a fixture)

S = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)

COUNTS = ("completed", "failed", "dead", "cancelled", "retried", "expired", "failures")
DEPTH = ("available", "scheduled", "running", "oldest_due_age_s")


def rollup(
    conn: Conn, *, now: datetime | None = None, until: datetime | None = None, since: datetime | None = None
) -> dict[str, Any]:
    return scalar(  # type: ignore[no-any-return]
        conn, "SELECT pgsched.rollup_queue_history(%s, %s, %s)", [until, now, since]
    )


def history_rows(conn: Conn) -> dict[tuple[datetime, str], dict[str, Any]]:
    rows = conn.execute("SELECT * FROM pgsched.queue_history ORDER BY minute, queue").fetchall()
    return {(r["minute"], r["queue"]): r for r in rows}


def without(row: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in keys}


def run_job(conn: Conn, queue: str, due: datetime, start: datetime, end: datetime, **kw: Any) -> int:
    """A job due at `due`, claimed at `start`, completed at `end`."""
    job_id = enqueue(conn, queue=queue, run_at=due, **kw)
    promote_due(conn, now=start)
    leased = claim_one(conn, queues=[queue], now=start)
    assert leased["id"] == job_id
    assert complete(conn, [pair(leased)], now=end) == {job_id: True}
    return job_id


@pytest.fixture
def m0(now: datetime) -> datetime:
    """A whole UTC minute two hours ahead of the database clock: nothing else happens there."""
    return (now + timedelta(hours=2)).astimezone(UTC).replace(second=0, microsecond=0)


@pytest.fixture
def seeded(conn: Conn, m0: datetime) -> dict[str, int]:
    """Minute m0: two completed mail jobs (lag 10 s and 20 s, run 2 s and 5 s), a failure that retries, a
    dead letter; an 'other' job cancelled before it ran. Minute m0+1: the retried job completes, and a
    dead letter is redriven. Left active: two mail jobs due at m0+1:30 and a far-future one."""
    ids = {
        "fast": run_job(conn, "mail", m0, m0 + 10 * S, m0 + 12 * S),
        "slow": run_job(conn, "mail", m0, m0 + 20 * S, m0 + 25 * S),
    }
    ids["flaky"] = enqueue(conn, queue="mail", run_at=m0)
    promote_due(conn, now=m0 + 30 * S)
    leased = claim_one(conn, queues=["mail"], now=m0 + 30 * S)
    assert fail(conn, *pair(leased), retry_at=m0 + 60 * S, now=m0 + 31 * S) == "scheduled"
    ids["dead"] = enqueue(conn, queue="mail", run_at=m0, max_attempts=1)
    promote_due(conn, now=m0 + 40 * S)
    leased = claim_one(conn, queues=["mail"], now=m0 + 40 * S)
    assert fail(conn, *pair(leased), now=m0 + 41 * S) == "dead"
    ids["cancelled"] = enqueue(conn, queue="other", run_at=m0 + timedelta(hours=1))
    assert cancel(conn, ids["cancelled"], now=m0 + 50 * S) == "cancelled"

    promote_due(conn, now=m0 + 70 * S)
    leased = claim_one(conn, queues=["mail"], now=m0 + 70 * S)
    assert leased["id"] == ids["flaky"]
    complete(conn, [pair(leased)], now=m0 + 80 * S)
    assert retry(conn, ids["dead"], now=m0 + 90 * S) == "retried"
    assert cancel(conn, ids["dead"], now=m0 + 95 * S) == "cancelled"  # the redrive is cancelled again

    ids["due"] = enqueue(conn, queue="mail", run_at=m0 + 90 * S)
    ids["due2"] = enqueue(conn, queue="mail", run_at=m0 + 100 * S)
    ids["later"] = enqueue(conn, queue="mail", run_at=m0 + timedelta(days=1))
    return ids


def test_a_minute_per_queue_with_counts_percentiles_and_the_sampled_depth(
    conn: Conn, m0: datetime, seeded: dict[str, int]
) -> None:
    at = m0 + 2 * MINUTE + 15 * S
    report = rollup(conn, now=at)
    assert report["rows"] == 4
    rows = history_rows(conn)
    assert set(rows) == {(m0, "mail"), (m0, "other"), (m0 + MINUTE, "mail"), (m0 + 2 * MINUTE, "mail")}

    first = rows[(m0, "mail")]
    assert {k: first[k] for k in COUNTS} == {
        "completed": 2,
        "failed": 1,
        "dead": 1,
        "cancelled": 0,
        "retried": 0,
        "expired": 0,
        "failures": 2,
    }
    assert first["completed_per_s"] == pytest.approx(2 / 60, abs=0.001)
    # Lags 10, 20 and 40 s (the dead job); run times 2, 5 and 1 s.
    assert first["lag_p50_s"] == pytest.approx(20.0)
    assert first["lag_p95_s"] == pytest.approx(38.0)
    assert first["run_p50_s"] == pytest.approx(2.0)
    assert first["run_p99_s"] == pytest.approx(4.94)
    assert {k: first[k] for k in DEPTH} == dict.fromkeys(DEPTH)  # nobody sampled m0 while it was open
    assert first["final"] is True

    other = rows[(m0, "other")]
    assert (other["cancelled"], other["completed"], other["lag_p50_s"]) == (1, 0, None)  # never started: no lag

    second = rows[(m0 + MINUTE, "mail")]
    assert (second["completed"], second["retried"], second["cancelled"], second["dead"]) == (1, 1, 1, 0)
    assert second["lag_p50_s"] == pytest.approx(10.0)  # due m0+60 s, started m0+70 s
    assert second["final"] is True

    current = rows[(m0 + 2 * MINUTE, "mail")]
    assert sum(current[k] for k in COUNTS) == 0
    assert (current["available"], current["scheduled"], current["running"]) == (0, 3, 0)
    assert current["oldest_due_age_s"] == pytest.approx(45.0)  # due at m0+1:30, sampled at m0+2:15
    assert current["final"] is False


def test_rolling_again_or_from_two_sessions_gives_the_same_rows(
    dsn: str, conn: Conn, m0: datetime, seeded: dict[str, int]
) -> None:
    at = m0 + 2 * MINUTE + 15 * S
    rollup(conn, now=at)
    first = history_rows(conn)
    assert rollup(conn, now=at, since=m0)["rows"] == 4
    assert history_rows(conn) == first

    # Later, from the start again: the closed minutes keep their counts and the depth sampled in them.
    with psycopg.connect(dsn, row_factory=dict_row) as other:
        later = m0 + 3 * MINUTE + 20 * S
        assert "rows" in rollup(other, now=later, since=m0)
        assert rollup(conn, now=later, since=m0) == {"skipped": "another rollup is running"}
        other.commit()
    assert rollup(conn, now=later, since=m0)["rows"] == 5
    again = history_rows(conn)
    for key, row in first.items():
        assert without(again[key], "rolled_at", "final") == without(row, "rolled_at", "final"), key
    assert again[(m0 + 2 * MINUTE, "mail")]["final"] is True
    assert again[(m0 + 3 * MINUTE, "mail")]["scheduled"] == 3  # the minute open now is sampled
    assert len(again) == 5


def test_the_open_minute_is_rolled_again_as_work_finishes(conn: Conn, m0: datetime) -> None:
    run_job(conn, "q", m0, m0 + 5 * S, m0 + 6 * S)
    rollup(conn, now=m0 + 7 * S)
    assert history_rows(conn)[(m0, "q")]["completed"] == 1
    run_job(conn, "q", m0, m0 + 30 * S, m0 + 31 * S)
    rollup(conn, now=m0 + 32 * S)
    assert history_rows(conn)[(m0, "q")]["completed"] == 2
    assert history_rows(conn)[(m0, "q")]["final"] is False
    # The next call starts after the last final minute only: m0 is not final yet, so it is rolled again.
    run_job(conn, "q", m0, m0 + 50 * S, m0 + 55 * S)
    report = rollup(conn, now=m0 + MINUTE + 20 * S)
    assert datetime.fromisoformat(report["from"]) <= m0
    row = history_rows(conn)[(m0, "q")]
    assert (row["completed"], row["final"]) == (3, True)
    assert row["available"] == 0  # sampled while m0 was open (no active job then)
    report = rollup(conn, now=m0 + 2 * MINUTE + 20 * S)
    assert datetime.fromisoformat(report["from"]) == m0 + MINUTE  # m0 is final: not read again


def test_until_stops_at_its_minute_and_default_calls_close_together_are_skipped(conn: Conn, m0: datetime) -> None:
    run_job(conn, "q", m0, m0 + 5 * S, m0 + 6 * S)
    run_job(conn, "q", m0, m0 + MINUTE, m0 + MINUTE + S)
    rollup(conn, now=m0 + 3 * MINUTE, until=m0 + 10 * S)
    assert set(history_rows(conn)) == {(m0, "q")}
    enqueue(conn, queue="q")  # something to sample now
    assert "rows" in rollup(conn)
    assert rollup(conn) == {"skipped": "rolled up less than 10 s ago"}


def test_events_of_jobs_whose_rows_are_gone_are_left_out(conn: Conn, m0: datetime) -> None:
    conn.execute(
        "INSERT INTO pgsched.job_events (job_id, at, kind, attempt) VALUES (987654321, %s, 'failed', 1)",
        [m0 + S],
    )
    rollup(conn, now=m0 + 2 * MINUTE)
    assert history_rows(conn) == {}


def test_maintain_keeps_day_partitions_of_the_rollup_and_drops_them_after_its_retention(
    conn: Conn, now: datetime
) -> None:
    def days() -> set[str]:
        rows = conn.execute(
            "SELECT c.relname FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'pgsched.queue_minutes'::regclass"
        ).fetchall()
        return {r["relname"] for r in rows}

    today = now.astimezone(UTC).date()
    stamp = today.strftime("%Y%m%d")
    assert {"queue_minutes_default", f"queue_minutes_p{stamp}"} <= days()
    run_job(conn, "q", now, now + S, now + 2 * S)
    rollup(conn, now=now + 3 * S)
    where = scalar(conn, "SELECT tableoid::regclass::text FROM pgsched.queue_minutes")
    assert where == f"pgsched.queue_minutes_p{stamp}"
    maintain(conn, now=now + timedelta(days=20))
    assert f"queue_minutes_p{stamp}" in days()  # 30 days by default, longer than the 14 of job_history
    assert scalar(conn, "SELECT count(*) FROM pgsched.queue_history") == 1
    conn.execute("UPDATE pgsched.config SET queue_history_retention = '7 days'")
    report = maintain(conn, now=now + timedelta(days=20))
    assert f"queue_minutes_p{stamp}" in report["partitions_dropped"]
    assert scalar(conn, "SELECT count(*) FROM pgsched.queue_history") == 0


def test_workers_roll_up_and_read_it_tenant_bound_sessions_and_enqueuers_do_not(
    conn: Conn,
    make_role: MakeRole,  # noqa: F811
    m0: datetime,
) -> None:
    run_job(conn, "q", m0, m0 + S, m0 + 2 * S, tenant="A")
    with connect(make_role("pgsched_worker")) as worker, refused(DENIED):  # only the owner moves the clock
        rollup(worker, now=m0 + 3 * S)
    assert rollup(conn, now=m0 + 3 * S)["rows"] == 1
    with connect(make_role("pgsched_worker")) as worker:
        assert scalar(worker, "SELECT sum(completed) FROM pgsched.queue_history") == 1
        with refused(DENIED):
            worker.execute("UPDATE pgsched.queue_minutes SET completed = 5")
    with connect(make_role("pgsched_worker", "pgsched_tenant_scoped", tenant="A")) as scoped:
        assert scalar(scoped, "SELECT count(*) FROM pgsched.queue_history") == 0  # sums of every tenant
    with connect(make_role("pgsched_enqueue")) as enqueuer:
        with refused(DENIED):
            enqueuer.execute("SELECT * FROM pgsched.queue_history")
        with refused(DENIED):
            rollup(enqueuer)
