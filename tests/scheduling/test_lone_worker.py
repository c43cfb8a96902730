"""`pgsched worker` alone fires schedules: with no scanner, a worker with housekeeping leases the
idle shards (epoch-fenced like a scanner), expands their schedules, and gives them back to a
scanner that starts; `pgsched doctor` flags schedules that nobody expands."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from pgsched.cli.doctor import check_schedules
from tests.scheduling.helpers import Conn, add_schedule, wait_for
from tests.scheduling.test_scanner_process import SHARDS, Process, shares

APP = "tests.scheduling.cron_app:app"


@pytest.fixture
def spawn(dsn: str, tmp_path: Path) -> Iterator[Callable[..., Process]]:
    started: list[Process] = []

    def start(name: str, *args: str) -> Process:
        process = Process(["--dsn", dsn, *args], tmp_path / f"{name}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def completed_ticks(conn: Conn) -> list[dict[str, object]]:
    return conn.execute(
        "SELECT run_at, result FROM pgsched.job_history WHERE schedule = 'every-second' AND state = 'completed'"
        " ORDER BY run_at"
    ).fetchall()


def status(conn: Conn, check: str) -> str:
    [found] = [c for c in check_schedules(conn, margin=timedelta(0)) if c.check == check]
    return f"{found.status}: {found.detail}"


def test_a_lone_worker_fires_a_seconds_schedule(conn: Conn, spawn: Callable[..., Process]) -> None:
    # Before any process runs, a schedule exists that nobody expands: doctor says so.
    add_schedule(conn, "orphan", "*/5 * * * * *")
    assert status(conn, "schedules expanded").startswith("fail: 1 schedules passed their next fire time")
    assert "nobody holds their shards" in status(conn, "schedules expanded")

    worker = spawn("worker", "worker", "--app", APP, "--queues", "ticks", "--concurrency", "4")
    keeper = wait_for(
        lambda: set(shares(conn)) == {k for k in shares(conn) if k.startswith("keeper:")} and shares(conn),
        timeout=30,
        what="the worker leasing the idle shards",
    )
    assert sum(keeper.values()) == SHARDS
    assert not conn.execute("SELECT 1 FROM pgsched.scanners").fetchone()
    ticks = wait_for(lambda: len(completed_ticks(conn)) >= 3 and completed_ticks(conn), timeout=30, what="3 ticks")
    # One job per second, each told its own fire time.
    run_ats = [t["run_at"] for t in ticks]
    assert len(set(run_ats)) == len(run_ats)
    assert all(t["result"] == t["run_at"].isoformat() for t in ticks)  # type: ignore[union-attr]
    assert all(at.microsecond == 0 for at in run_ats)  # type: ignore[attr-defined]
    wait_for(lambda: status(conn, "schedules expanded").startswith("ok"), timeout=15, what="doctor's ok")

    # A scanner starts: the worker hands the shards over, the schedule goes on firing.
    spawn("scanner", "scanner", "--lease", "2", "--name", "scanner-a")
    wait_for(lambda: shares(conn) == {"scanner-a": SHARDS}, timeout=30, what="the scanner taking every shard")
    seen = len(completed_ticks(conn))
    wait_for(lambda: len(completed_ticks(conn)) >= seen + 2, timeout=30, what="ticks under the scanner")
    assert "expands the schedules of shards" in worker.output()
