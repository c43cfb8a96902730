"""Schedule expansion through the database is chunkable: windows cut anywhere (and re-covered, as a
restarted scanner does) create exactly the jobs and decisions of one expansion of the whole range."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from pgsched.runtime.scanner import plan_occurrences
from tests.conftest import drop_database, new_database

Conn = psycopg.Connection[dict[str, Any]]

CRONS = ["30 2 * * *", "30 1 * * *", "0 * * * *", "*/15 * * * *", "0 2,3 * * *", "*/20 1-3 * * *"]
ZONES = ["Europe/Berlin", "America/New_York"]
TRANSITIONS = [
    datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # Berlin, spring forward
    datetime(2026, 10, 25, 1, 0, tzinfo=UTC),  # Berlin, fall back
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # New York, spring forward
    datetime(2026, 11, 1, 6, 0, tzinfo=UTC),  # New York, fall back
]
MINUTES = st.integers(0, 14 * 60).map(lambda m: timedelta(minutes=m))


@pytest.fixture(scope="module")
def conn(admin_dsn: str, template_db: str) -> Iterator[Conn]:
    name, url = new_database(admin_dsn, template_db)
    try:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as c:
            yield c
    finally:
        drop_database(admin_dsn, name)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    anchor = draw(st.sampled_from(TRANSITIONS))
    start = anchor - draw(MINUTES) - draw(st.sampled_from([timedelta(0), timedelta(seconds=30)]))
    end = anchor + draw(MINUTES) + timedelta(minutes=1)
    cuts = sorted(set(draw(st.lists(st.integers(1, int((end - start).total_seconds()) - 1), max_size=6))))
    bounds = [start, *(start + timedelta(seconds=c) for c in cuts), end]
    # A chunk may start before the previous one ended (a scanner re-covering part of a window).
    pairs = list(itertools.pairwise(bounds))
    backs = draw(st.lists(st.sampled_from([0, 0, 60, 1800, 3600]), min_size=len(pairs), max_size=len(pairs)))
    chunks = [(max(start, lo - timedelta(seconds=back)), hi) for (lo, hi), back in zip(pairs, backs, strict=True)]
    return {
        "cron": draw(st.sampled_from(CRONS)),
        "zone": draw(st.sampled_from(ZONES)),
        "gap": draw(st.sampled_from(["run", "skip"])),
        "overlap": draw(st.sampled_from(["once", "twice"])),
        "start": start,
        "end": end,
        "chunks": chunks,
    }


def expand(conn: Conn, name: str, start: datetime, end: datetime, now: datetime, epochs: dict[int, int]) -> None:
    row = conn.execute("SELECT * FROM pgsched.schedules WHERE name = %s", [name]).fetchone()
    assert row is not None
    plan, until = plan_occurrences(row, start, end, now)
    assert until == end
    conn.execute(
        "SELECT pgsched.add_occurrences('prop', %s, %s, %s, %s, %s, %s, %s, %s)",
        [row["shard"], epochs[row["shard"]], name, row["version"], json.dumps(plan), start, end, now],
    )


def outcome(conn: Conn, name: str) -> tuple[list[datetime], list[tuple[datetime, str, str | None]]]:
    jobs = conn.execute("SELECT run_at FROM pgsched.jobs WHERE schedule = %s ORDER BY run_at", [name]).fetchall()
    occurrences = conn.execute(
        "SELECT fire_at, decision, dst FROM pgsched.schedule_occurrences WHERE schedule = %s ORDER BY fire_at",
        [name],
    ).fetchall()
    return [j["run_at"] for j in jobs], [(o["fire_at"], o["decision"], o["dst"]) for o in occurrences]


@settings(max_examples=40, deadline=None)
@given(case=cases())
def test_any_chunking_of_a_window_creates_the_jobs_of_one_expansion(conn: Conn, case: dict[str, Any]) -> None:
    now = case["start"] - timedelta(minutes=1)  # decided ahead of time: no misfires
    with conn.transaction(force_rollback=True):
        rows = conn.execute(
            "SELECT shard, epoch FROM pgsched.acquire_shards('prop', '1 hour', p_now => %s)", [now]
        ).fetchall()
        epochs = {int(r["shard"]): int(r["epoch"]) for r in rows}
        for name in ("whole", "chunked"):
            conn.execute(
                "SELECT pgsched.upsert_schedule(name => %s, cron => %s, task => 't', timezone => %s,"
                " gap_policy => %s, overlap_policy => %s)",
                [name, case["cron"], case["zone"], case["gap"], case["overlap"]],
            )
        expand(conn, "whole", case["start"], case["end"], now, epochs)
        for lo, hi in case["chunks"]:
            expand(conn, "chunked", lo, hi, now, epochs)

        whole_jobs, whole_decisions = outcome(conn, "whole")
        chunked_jobs, chunked_decisions = outcome(conn, "chunked")
        assert chunked_jobs == whole_jobs
        assert len(set(chunked_jobs)) == len(chunked_jobs)
        assert chunked_decisions == whole_decisions
        keys = conn.execute(
            "SELECT count(*) AS n FROM pgsched.idempotency_keys WHERE key LIKE 'pgsched:schedule:chunked:%%'"
        ).fetchone()
        assert keys is not None
        assert keys["n"] == len(chunked_jobs)
