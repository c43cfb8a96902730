"""Workers and scanners vacuum pgsched.jobs' partitions once dead rows pile up, without waiting for autovacuum."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched.errors import ConfigurationError
from pgsched.runtime import vacuumer as vacuumer_module
from pgsched.runtime.scanner import Scanner, ScannerOptions
from pgsched.runtime.vacuumer import Vacuumer
from pgsched.runtime.worker import WorkerOptions
from tests.integration.conftest import wait_for

# Also run on the second PostgreSQL version CI tests (a smoke of the worker tier).
pytestmark = pytest.mark.smoke

JOBS = 24_000


# Unique idempotency keys for n jobs: they spread the jobs over every shard.
SPREAD = "ARRAY(SELECT gen_random_uuid()::text FROM generate_series(1, %s))"


def make_dead_rows(dsn: str, n: int = JOBS) -> None:
    """n jobs enqueued, claimed and completed through pgsched's functions: two dead row versions each.

    They go to a queue of their own, which no worker of these tests serves, and over every shard (keyed jobs
    hash over them; keyless ones enqueued together share one).
    """
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "SELECT pgsched.enqueue_many(array_fill('t'::text, ARRAY[%s]), array_fill('{}'::jsonb, ARRAY[%s]),"
            f" array_fill('vac'::text, ARRAY[%s]), idempotency_keys => {SPREAD})",
            [n, n, n, n],
        )
        c.execute(
            "SELECT pgsched.complete(array_agg(id), array_agg(lease_token))"
            " FROM pgsched.claim('w', ARRAY['vac'], %s, interval '1 minute')",
            [n],
        )
        c.execute("SELECT pg_stat_force_next_flush()")


def partition_stats(dsn: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        rows = c.execute(
            "SELECT relname, n_dead_tup, vacuum_count FROM pg_stat_all_tables"
            " WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgsched.jobs'::regclass)"
        ).fetchall()
    return {r["relname"]: r for r in rows}


def candidates(dsn: str, role: str | None = None) -> list[tuple[str, str, int, int]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        if role:
            c.execute(f"SET ROLE {role}")
        return c.execute(
            "SELECT schema_name, table_name, dead, live FROM pgsched.vacuum_candidates(1000, 0.2) WHERE needs_vacuum"
        ).fetchall()


@pytest.fixture
def worker_role(dsn: str) -> str:
    """A login-less role with pgsched_worker's rights only (not the owner, not a superuser)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "DO $$ BEGIN CREATE ROLE pgsched_test_vacuum NOLOGIN NOSUPERUSER IN ROLE pgsched_worker;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    return "pgsched_test_vacuum"


def test_vacuums_the_partitions_that_need_it(dsn: str) -> None:
    make_dead_rows(dsn)
    found = wait_for(lambda: candidates(dsn), timeout=15, what="dead rows in the statistics")
    assert {schema for schema, _, _, _ in found} == {"pgsched"}
    assert all(dead >= 1000 for _, _, dead, _ in found)
    before = partition_stats(dsn)
    vacuumer = Vacuumer(dsn, interval=60, purpose="test", min_dead=1000)
    try:
        done = vacuumer.run_once()
    finally:
        vacuumer.close()
    assert sorted(done) == sorted(f"pgsched.{table}" for _, table, _, _ in found)
    assert vacuumer.vacuums == len(found)

    def vacuumed() -> bool:
        after = partition_stats(dsn)
        return all(after[table]["vacuum_count"] > before[table]["vacuum_count"] for _, table, _, _ in found)

    wait_for(vacuumed, timeout=15, what="vacuum_count to move for every candidate")
    after = partition_stats(dsn)
    assert sum(after[t]["n_dead_tup"] for _, t, _, _ in found) < sum(before[t]["n_dead_tup"] for _, t, _, _ in found)
    # Nothing left worth a vacuum: the next round does nothing.
    assert candidates(dsn) == []


def test_below_the_thresholds_nothing_is_named(dsn: str) -> None:
    make_dead_rows(dsn, 400)  # 800 dead row versions over 8 partitions
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "SELECT pgsched.enqueue_many(array_fill('t'::text, ARRAY[4000]), array_fill('{}'::jsonb, ARRAY[4000]),"
            f" idempotency_keys => {SPREAD})",
            [4000],
        )
        c.execute("SELECT pg_stat_force_next_flush()")

    def counted() -> bool:
        with psycopg.connect(dsn, autocommit=True) as c:
            row = c.execute(
                "SELECT sum(n_dead_tup), sum(n_live_tup) FROM pg_stat_all_tables"
                " WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgsched.jobs'::regclass)"
            ).fetchone()
        return row is not None and row[0] >= 800 and row[1] >= 4000

    wait_for(counted, timeout=15, what="the statistics to count the dead and live rows")
    with psycopg.connect(dsn, autocommit=True) as c:
        # Below the default floor of dead rows.
        assert c.execute("SELECT count(*) FROM pgsched.vacuum_candidates()").fetchone() == (0,)
        # About 100 dead beside 500 live in each partition: under a ratio of 1, over one of 0.05.
        assert c.execute("SELECT count(*) FROM pgsched.vacuum_candidates(0, 1)").fetchone() == (0,)
        assert c.execute("SELECT count(*) FROM pgsched.vacuum_candidates(0, 0.05)").fetchone() == (8,)


def test_a_burst_gets_the_partitions_analyzed(dsn: str) -> None:
    """Plans cached on an empty table scan it once a burst arrives; ANALYZE makes every session plan again."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ANALYZE pgsched.jobs")
        # A worker's connection plans its claims while the table is empty.
        claim = "SELECT count(*) FROM pgsched.claim('w', ARRAY['other'], 10, interval '1 minute', '{}', %s)"
        for shard in (None, 1, None, 1, None, 1, None, 1):
            c.execute(claim, [shard])
        c.execute(
            "SELECT pgsched.enqueue_many(array_fill('t'::text, ARRAY[40000]), array_fill('{}'::jsonb, ARRAY[40000]),"
            f" array_fill('other'::text, ARRAY[40000]), idempotency_keys => {SPREAD})",
            [40000],
        )
        c.execute("SELECT pg_stat_force_next_flush()")

        def stale() -> list[tuple[str, bool, bool]]:
            return c.execute(
                "SELECT table_name, needs_vacuum, needs_analyze FROM pgsched.vacuum_candidates() WHERE needs_analyze"
            ).fetchall()

        found = wait_for(lambda: len(stale()) == 8 and stale(), timeout=15, what="every partition to need ANALYZE")
        assert not any(needs_vacuum for _, needs_vacuum, _ in found)
        vacuumer = Vacuumer(dsn, interval=60, purpose="test")
        try:
            assert len(vacuumer.run_once()) == 8
        finally:
            vacuumer.close()
        assert (vacuumer.vacuums, vacuumer.analyzes) == (0, 8)
        reltuples = c.execute(
            "SELECT sum(reltuples) FROM pg_class"
            " WHERE oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgsched.jobs'::regclass)"
        ).fetchone()
        assert reltuples is not None
        assert reltuples[0] == 40000
        assert stale() == []


def test_bad_thresholds_are_refused(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="p_min_dead >= 0"):
            c.execute("SELECT * FROM pgsched.vacuum_candidates(-1, 0.2)")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("SELECT * FROM pgsched.vacuum_candidates(10, NULL)")
    with pytest.raises(ValueError, match="positive"):
        Vacuumer(dsn, interval=0, purpose="test")


def test_worker_role_vacuums_only_where_postgres_lets_it(dsn: str, worker_role: str) -> None:
    make_dead_rows(dsn)
    wait_for(lambda: candidates(dsn), timeout=15, what="dead rows in the statistics")
    with psycopg.connect(dsn, autocommit=True) as c:
        version = int(c.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
    named = candidates(dsn, worker_role)
    if version < 170000:
        # Only the owner may vacuum: the worker's role is told of nothing, so it never tries.
        assert named == []
        return
    # PostgreSQL 17+: the install grants MAINTAIN on the shard partitions to pgsched_worker.
    assert named
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"SET ROLE {worker_role}")
        notices: list[str] = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        c.execute(f"VACUUM (SKIP_LOCKED) pgsched.{named[0][1]}")
    assert not any("skipping" in n or "permission" in n for n in notices), notices


def test_worker_runs_it(dsn: str, start_worker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vacuumer_module, "MIN_DEAD", 1000)
    running = start_worker(vacuum_interval=0.3)
    vacuumer = wait_for(lambda: running.worker._vacuumer, what="the worker's vacuum thread")
    make_dead_rows(dsn)
    wait_for(lambda: vacuumer.vacuums > 0, timeout=60, what="the worker's first vacuum")
    running.stop()
    assert not vacuumer._thread.is_alive()

    for options in ({"vacuum_interval": 0}, {"housekeeping": False}):
        other = start_worker(**options)
        assert other.worker._vacuumer is None
        other.stop()
    with pytest.raises(ConfigurationError, match="vacuum interval"):
        WorkerOptions(vacuum_interval=-1).validate()


def test_scanner_runs_it(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vacuumer_module, "MIN_DEAD", 1000)
    scanner = Scanner(dsn, ScannerOptions(install_signal_handlers=False, vacuum_interval=0.3))
    thread = threading.Thread(target=scanner.run, daemon=True)
    thread.start()
    try:
        vacuumer = wait_for(lambda: scanner._vacuumer, what="the scanner's vacuum thread")
        make_dead_rows(dsn)
        wait_for(lambda: vacuumer.vacuums > 0, timeout=60, what="the scanner's first vacuum")
    finally:
        scanner.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert not vacuumer._thread.is_alive()
    with pytest.raises(ValueError, match="vacuum interval"):
        Scanner(dsn, ScannerOptions(vacuum_interval=-1))
