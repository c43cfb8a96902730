"""A session idle in a transaction that wrote (an xid, no snapshot) pins the vacuum horizon: `pgsched doctor`,
the database metrics and the vacuum thread see it, and the vacuum thread stops vacuuming in vain."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched.cli.doctor import FAIL, OK, WARN, Limits, check_dead_tuples, check_horizon
from pgsched.observe.metrics import queue_families, read_snapshot
from pgsched.runtime import vacuumer as vacuumer_module
from pgsched.runtime.vacuumer import Vacuumer
from tests.integration.conftest import wait_for
from tests.integration.test_vacuumer import make_dead_rows

LIMITS = Limits(
    max_xact_age=timedelta(0),
    max_idle_xact=timedelta(minutes=1),
    max_due_age=timedelta(minutes=5),
    max_dead_ratio=1.0,
)


@pytest.fixture
def holder(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A session that took an xid and went idle in its transaction, as an application that wrote and forgot."""
    conn = psycopg.connect(dsn, application_name="horizon-holder")
    conn.execute("SELECT pg_current_xact_id()")
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


def session(dsn: str, pid: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        row = c.execute(
            "SELECT state, backend_xid::text AS xid, backend_xmin::text AS xmin FROM pg_stat_activity WHERE pid = %s",
            [pid],
        ).fetchone()
    assert row is not None
    return row


def dead_in_jobs(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_all_tables"
            " WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgsched.jobs'::regclass)"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_holder_has_an_xid_and_no_snapshot(dsn: str, holder: psycopg.Connection[Any]) -> None:
    """What the tests below rely on: such a session shows in backend_xid only."""
    found = wait_for(
        lambda: (s := session(dsn, holder.info.backend_pid))["state"] == "idle in transaction" and s,
        what="the holder to go idle in its transaction",
    )
    assert found["xid"] is not None
    assert found["xmin"] is None


def test_xmin_horizon_names_a_session_holding_an_xid(dsn: str, holder: psycopg.Connection[Any]) -> None:
    pid = holder.info.backend_pid
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        c.execute("SELECT pg_current_xact_id()")  # one transaction later: the holder's xid is 1 old, or more
        rows = c.execute("SELECT * FROM pgsched.xmin_horizon()").fetchall()
    assert rows, "a session holding an xid holds back the horizon"
    oldest = rows[0]
    assert (oldest["holder"], oldest["pid"], oldest["application_name"]) == ("session", pid, "horizon-holder")
    assert oldest["xid_age"] >= 1
    assert oldest["age_s"] >= 0


def test_doctor_fails_the_horizon_held_by_an_xid(dsn: str, holder: psycopg.Connection[Any]) -> None:
    pid = holder.info.backend_pid
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        horizon = check_horizon(c, LIMITS)[0]
    assert horizon.check == "xmin horizon"
    assert horizon.status == FAIL, horizon
    assert f"pid {pid}" in horizon.detail
    assert f"pg_terminate_backend({pid})" in horizon.detail


def test_doctor_passes_the_horizon_when_nothing_holds_it(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        assert check_horizon(c, LIMITS)[0].status == OK


def test_doctor_sums_dead_rows_over_a_partitioned_table(dsn: str, holder: psycopg.Connection[Any]) -> None:
    """16,000 dead row versions over 8 partitions (2,000 each, none over the threshold alone) warn for jobs."""
    make_dead_rows(dsn, 8000)
    wait_for(lambda: dead_in_jobs(dsn) >= 16_000, timeout=15, what="the statistics to count the dead rows")
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        check = check_dead_tuples(c, LIMITS)
    assert check.status == WARN, check
    assert check.detail.startswith("pgsched.jobs: "), check
    assert check.data is not None
    jobs = next(t for t in check.data["tables"] if t["table"] == "pgsched.jobs")
    assert jobs["dead"] >= 16_000
    assert jobs["partitions"] == 8


def test_metrics_show_the_horizon_age_and_dead_rows_per_table(dsn: str, holder: psycopg.Connection[Any]) -> None:
    make_dead_rows(dsn, 2000)
    wait_for(lambda: dead_in_jobs(dsn) >= 4000, timeout=15, what="the statistics to count the dead rows")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_current_xact_id()")
        families = {f.name: f for f in queue_families(read_snapshot(c))}
    age_s = families["pgsched_xmin_horizon_age_seconds"].samples
    age_xids = families["pgsched_xmin_horizon_age_xids"].samples
    assert len(age_s) == 1
    assert age_s[0].value >= 0
    assert len(age_xids) == 1
    assert age_xids[0].value >= 1
    dead = {s.labels["table"]: s.value for s in families["pgsched_dead_tuples"].samples}
    assert dead["pgsched.jobs"] >= 4000


def test_vacuumer_backs_off_while_the_same_holder_pins_the_horizon(
    dsn: str, holder: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    pid = holder.info.backend_pid
    make_dead_rows(dsn)
    wait_for(lambda: dead_in_jobs(dsn) >= 40_000, timeout=15, what="the statistics to count the dead rows")
    vacuumer = Vacuumer(dsn, interval=60, purpose="test", min_dead=1000)
    caplog.set_level(logging.INFO, logger="pgsched.runtime.vacuumer")
    try:
        first = vacuumer.run_once()  # what died before the pin can go: one vacuum each
        assert len(first) == 8
        assert vacuumer.vacuums == 8
        # Nothing died since, and nothing that did could be removed: no second visit.
        assert vacuumer.run_once() == []
        assert vacuumer.vacuums == 8
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(said) == 1, said
        assert f"pid {pid}" in said[0], said
        assert "horizon-holder" in said[0], said

        holder.rollback()  # the horizon moves on: vacuums resume
        assert len(vacuumer.run_once()) == 8
        assert vacuumer.vacuums == 16
    finally:
        vacuumer.close()


def test_a_partition_grown_far_past_the_planners_pages_is_analyzed(dsn: str, holder: psycopg.Connection[Any]) -> None:
    """Under a pinned horizon the live rows stay few while the partitions fill with dead ones: plans cached while
    they were small (a hash join over sequential scans of a page or two) would read every dead row at each call.
    The pages grown past twice what the planner last recorded get the partition analyzed, and so replanned."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("VACUUM ANALYZE pgsched.jobs")
    make_dead_rows(dsn, 8000)  # about 1,000 jobs per partition, each leaving its row versions behind
    with psycopg.connect(dsn, autocommit=True) as c:
        stale = c.execute(
            "SELECT table_name FROM pgsched.vacuum_candidates(1000000, 1000) WHERE needs_analyze AND NOT needs_vacuum"
        ).fetchall()
        assert len(stale) == 8, stale
        pages = c.execute(
            "SELECT min(relpages) FROM pg_class"
            " WHERE oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgsched.jobs'::regclass)"
        ).fetchone()
        assert pages == (0,)
    vacuumer = Vacuumer(dsn, interval=60, purpose="test", min_dead=1_000_000)
    try:
        assert len(vacuumer.run_once()) == 8
        assert (vacuumer.vacuums, vacuumer.analyzes) == (0, 8)
    finally:
        vacuumer.close()
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pgsched.vacuum_candidates(1000000, 1000)").fetchone() == (0,)


def open_slot_aged(dsn: str, seconds: float) -> int:
    """The open slot of the ring, as if opened that many seconds ago."""
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(
            "UPDATE pgsched.ready_ring SET opened_at = clock_timestamp() - make_interval(secs => %s)"
            " WHERE closed_at IS NULL RETURNING slot",
            [seconds],
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_ring_turns_four_times_a_second_while_a_transaction_holds_the_horizon(
    dsn: str, holder: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a held horizon no claimed job's ring entry can be marked dead, so every claim steps over all those of
    its slot: slots then stay open a quarter second, not a second. Without a holder, the usual second."""
    monkeypatch.setattr(vacuumer_module, "PINNED_AFTER", 0.0)  # the holder's transaction is a moment old
    vacuumer = Vacuumer(dsn, interval=60, purpose="test")
    try:
        vacuumer.rotate()  # the ring's rows exist
        vacuumer.watch_horizon()
        assert vacuumer.rotate_interval == vacuumer_module.PINNED_ROTATE_INTERVAL
        open_slot_aged(dsn, 0.3)  # open longer than a quarter second: the next slot opens
        assert [a for _, a, _ in vacuumer.rotate() if a == "opened"] == ["opened"]

        holder.rollback()  # the horizon moves on: the usual pace again
        vacuumer.watch_horizon()
        assert vacuumer.rotate_interval == vacuumer_module.ROTATE_INTERVAL
        open_slot_aged(dsn, 0.3)  # open for less than a second: it stays open
        assert [a for _, a, _ in vacuumer.rotate() if a == "opened"] == []
    finally:
        vacuumer.close()
