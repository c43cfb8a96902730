"""pgsched.report_progress(): a running job's progress, kept in its row and history, fenced by its lease token."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from tests.sql.helpers import (
    Conn,
    claim_one,
    complete,
    enqueue,
    expire_leases,
    history,
    job,
    pair,
    reads_of_a_few_jobs,
    refused,
    running_behind_empty_statistics,
    snapshot,
)


def report(
    conn: Conn,
    pairs: Sequence[tuple[int, int]],
    fractions: Sequence[float | None],
    notes: Sequence[str | None] | None = None,
    *,
    now: datetime | None = None,
) -> dict[int, bool]:
    rows = conn.execute(
        "SELECT * FROM pgsched.report_progress(%s::bigint[], %s::bigint[], %s::real[], %s::text[], %s)",
        [[p[0] for p in pairs], [p[1] for p in pairs], list(fractions), None if notes is None else list(notes), now],
    ).fetchall()
    return {r["job_id"]: r["kept"] for r in rows}


def test_progress_is_kept_in_the_row_with_the_database_clock(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    assert report(conn, [pair(got)], [0.25], ["page 1 of 4"], now=now + timedelta(seconds=3)) == {job_id: True}
    row = job(conn, job_id)
    assert row is not None
    assert (row["progress"], row["progress_note"], row["progress_at"]) == (
        0.25,
        "page 1 of 4",
        now + timedelta(seconds=3),
    )
    assert report(conn, [pair(got)], [1.0], now=now + timedelta(seconds=4)) == {job_id: True}
    row = job(conn, job_id)
    assert row is not None
    assert (row["progress"], row["progress_note"]) == (1.0, None)


def test_the_history_row_takes_the_last_progress(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    report(conn, [pair(got)], [0.5], ["half"], now=now)
    assert complete(conn, [pair(got)], now=now + timedelta(seconds=1)) == {job_id: True}
    [done] = history(conn, job_id)
    assert (done["progress"], done["progress_note"], done["progress_at"]) == (0.5, "half", now)


def test_a_stale_token_writes_nothing(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    old = claim_one(conn, worker="w1", now=now)
    assert expire_leases(conn, now=now + timedelta(minutes=5)) == 1
    new = claim_one(conn, worker="w2", now=now + timedelta(minutes=5))
    report(conn, [pair(new)], [0.1], now=now + timedelta(minutes=5))
    before = snapshot(conn)
    assert report(conn, [pair(old)], [0.9], ["stale"], now=now + timedelta(minutes=6)) == {job_id: False}
    assert snapshot(conn) == before


def test_one_statement_reports_many_jobs(conn: Conn, now: datetime) -> None:
    a, b = enqueue(conn), enqueue(conn)
    pa, pb = pair(claim_one(conn, now=now)), pair(claim_one(conn, now=now))
    assert report(conn, [pa, pb, (999999, 1)], [0.1, 0.2, 0.3], ["a", None, "x"], now=now) == {
        pa[0]: True,
        pb[0]: True,
        999999: False,
    }
    assert {a, b} == {pa[0], pb[0]}


def test_bad_reports_are_refused_and_write_nothing(conn: Conn, now: datetime) -> None:
    enqueue(conn)
    got = pair(claim_one(conn, now=now))
    before = snapshot(conn)
    for fraction in (-0.1, 1.5, float("nan"), None):
        with refused("22023") as info:
            report(conn, [got], [fraction], now=now)
        assert "from 0 to 1" in str(info.value)
    with refused("22023") as info:
        report(conn, [got], [0.5], ["x" * 1001], now=now)
    assert "1000 characters" in str(info.value)
    with refused("22023"):
        report(conn, [got], [0.5, 0.6], now=now)
    assert snapshot(conn) == before


def test_report_progress_probes_its_jobs_by_id_whatever_the_statistics_say(conn: Conn, now: datetime) -> None:
    """As heartbeat(): never a plan that reads pgsched.jobs' partitions whole (or all of their running rows)."""
    got = running_behind_empty_statistics(conn, now)
    reads_of_a_few_jobs(conn, lambda: report(conn, [pair(r) for r in got], [0.5, 0.5, 0.5]))
