"""pgsched.maintain(): day partitions ahead, retention by dropping whole days, pruned keys and workers."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import psycopg
from psycopg.rows import dict_row

from tests.sql.helpers import Conn, claim_one, complete, enqueue, fail, maintain, pair, scalar

PARENTS = ("job_history", "job_events")


def day_partitions(conn: Conn, parent: str) -> set[date]:
    rows = conn.execute(
        """SELECT c.relname FROM pg_catalog.pg_inherits i
           JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
           WHERE i.inhparent = %s::regclass""",
        [f"pgsched.{parent}"],
    ).fetchall()
    names = {r["relname"] for r in rows}
    assert f"{parent}_default" in names
    return {datetime.strptime(n[-8:], "%Y%m%d").date() for n in names if n != f"{parent}_default"}


def utc_day(at: datetime) -> date:
    return at.astimezone(UTC).date()


def midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def where_is(conn: Conn, job_id: int) -> tuple[str, list[str]]:
    """The partition holding the job's history row, and those holding its events."""
    history = scalar(conn, "SELECT tableoid::regclass::text FROM pgsched.job_history WHERE id = %s", [job_id])
    events = conn.execute(
        "SELECT DISTINCT tableoid::regclass::text AS part FROM pgsched.job_events WHERE job_id = %s", [job_id]
    ).fetchall()
    return history, sorted(r["part"] for r in events)


def finish_job_at(conn: Conn, at: datetime) -> int:
    """A job that dies at `at`: it leaves a history row and two events (its claim, its death)."""
    job_id = enqueue(conn)
    fail(conn, *pair(claim_one(conn, now=at)), final=True, now=at)
    return job_id


def test_partitions_are_created_from_yesterday_to_the_days_ahead(conn: Conn, now: datetime) -> None:
    at = now + timedelta(days=100)
    report = maintain(conn, now=at)
    today = utc_day(at)
    expected = {today + timedelta(days=d) for d in range(-1, 4)}  # partitions_ahead = 3
    for parent in PARENTS:
        assert expected <= day_partitions(conn, parent)
    assert report["partitions_created"] == 15  # and queue_minutes
    assert maintain(conn, now=at)["partitions_created"] == 0  # idempotent


def test_partitions_ahead_is_configurable(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET partitions_ahead = 7")
    at = now + timedelta(days=100)
    maintain(conn, now=at)
    today = utc_day(at)
    for parent in PARENTS:
        days = day_partitions(conn, parent)
        assert today + timedelta(days=7) in days
        assert today + timedelta(days=8) not in days


def test_install_leaves_partitions_for_today(conn: Conn, now: datetime) -> None:
    for parent in PARENTS:
        assert utc_day(now) in day_partitions(conn, parent)
    job_id = finish_job_at(conn, now)
    stamp = utc_day(now).strftime("%Y%m%d")
    assert where_is(conn, job_id) == (f"pgsched.job_history_p{stamp}", [f"pgsched.job_events_p{stamp}"])


def test_partitions_past_the_retention_are_dropped(conn: Conn, now: datetime) -> None:
    before = {parent: day_partitions(conn, parent) for parent in PARENTS}
    at = now + timedelta(days=16)
    report = maintain(conn, now=at)
    limit = at - timedelta(days=14)  # history_retention and events_retention
    for parent in PARENTS:
        kept = day_partitions(conn, parent)
        for day in before[parent]:
            gone = midnight(day + timedelta(days=1)) <= limit
            assert (day not in kept) == gone, day
    dropped = {name for name in report["partitions_dropped"]}
    assert dropped
    assert all(name.startswith(PARENTS) for name in dropped)
    assert not any(scalar(conn, "SELECT to_regclass(%s) IS NOT NULL", [f"pgsched.{n}"]) for n in dropped)


def test_retention_is_per_table(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET events_retention = '60 days'")
    today = utc_day(now)
    maintain(conn, now=now + timedelta(days=30))
    assert today not in day_partitions(conn, "job_history")
    assert today in day_partitions(conn, "job_events")


def test_finished_jobs_stay_for_the_retention_then_go(conn: Conn, now: datetime) -> None:
    job_id = finish_job_at(conn, now)
    maintain(conn, now=now + timedelta(days=13))
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history WHERE id = %s", [job_id]) == 1
    maintain(conn, now=now + timedelta(days=16))
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history WHERE id = %s", [job_id]) == 0
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_events WHERE job_id = %s", [job_id]) == 0


def test_rows_in_the_default_partition_move_into_a_new_day_partition(conn: Conn, now: datetime) -> None:
    at = now + timedelta(days=50)
    job_id = finish_job_at(conn, at)
    assert where_is(conn, job_id) == ("pgsched.job_history_default", ["pgsched.job_events_default"])
    total = scalar(conn, "SELECT count(*) FROM pgsched.job_history")
    maintain(conn, now=at)
    stamp = utc_day(at).strftime("%Y%m%d")
    assert where_is(conn, job_id) == (f"pgsched.job_history_p{stamp}", [f"pgsched.job_events_p{stamp}"])
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history") == total
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_events WHERE job_id = %s", [job_id]) == 2
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history_default") == 0
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_events_default") == 0


def test_rows_in_the_default_partition_from_days_outside_the_window_also_move(conn: Conn, now: datetime) -> None:
    at = now + timedelta(days=50)
    job_id = finish_job_at(conn, at)
    maintain(conn, now=at + timedelta(days=7))  # maintain did not run for a week
    stamp = utc_day(at).strftime("%Y%m%d")
    assert where_is(conn, job_id) == (f"pgsched.job_history_p{stamp}", [f"pgsched.job_events_p{stamp}"])
    maintain(conn, now=at + timedelta(days=16))
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history WHERE id = %s", [job_id]) == 0


def test_rows_in_the_default_partition_older_than_the_retention_are_dropped(conn: Conn, now: datetime) -> None:
    old = finish_job_at(conn, now - timedelta(days=30))
    recent = finish_job_at(conn, now - timedelta(days=5))
    maintain(conn, now=now)
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history WHERE id = %s", [old]) == 0
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history WHERE id = %s", [recent]) == 1
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history_default") == 0


def test_expired_idempotency_keys_are_pruned(conn: Conn, now: datetime) -> None:
    enqueue(conn, idempotency_key="done")
    complete(conn, [pair(claim_one(conn, now=now))], now=now)
    enqueue(conn, idempotency_key="active")
    assert maintain(conn, now=now + timedelta(days=14))["idempotency_keys_pruned"] == 0
    assert maintain(conn, now=now + timedelta(days=15))["idempotency_keys_pruned"] == 1
    keys = [r["key"] for r in conn.execute("SELECT key FROM pgsched.idempotency_keys").fetchall()]
    assert keys == ["active"]


def test_workers_unseen_for_a_day_are_forgotten(conn: Conn, now: datetime) -> None:
    conn.execute("SELECT pgsched.register_worker('gone')")
    assert maintain(conn, now=now + timedelta(hours=23))["workers_pruned"] == 0
    assert maintain(conn, now=now + timedelta(days=1, minutes=1))["workers_pruned"] == 1
    assert scalar(conn, "SELECT count(*) FROM pgsched.workers") == 0


def test_concurrent_runs_take_turns(dsn: str, conn: Conn, now: datetime) -> None:
    with psycopg.connect(dsn, row_factory=dict_row) as first:
        first.execute("SELECT pgsched.maintain(%s)", [now + timedelta(days=100)])
        assert maintain(conn, now=now + timedelta(days=100)) == {"skipped": "another maintain() is running"}
        first.commit()
    assert maintain(conn, now=now + timedelta(days=100))["partitions_created"] == 0
