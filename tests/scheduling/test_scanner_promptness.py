"""A scanner's promotions never wait for its expansion of schedules: a dense schedule's pass (time-boxed to
a quarter lease) runs beside the scans, not in front of them."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from tests.scheduling.helpers import Conn, add_schedule, db_now, schedule, wait_for
from tests.scheduling.test_scanner_shards import RunningScanner, start_scanner  # noqa: F401 (fixture)


def lateness(conn: Conn, job_id: int, timeout: float = 20.0) -> float:
    """Seconds from the job's run_at to the moment it is seen available (polled every 5 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT state::text AS s, clock_timestamp() - run_at AS late FROM pgsched.jobs WHERE id = %s", [job_id]
        ).fetchone()
        assert row is not None
        if row["s"] == "available":
            return float(row["late"].total_seconds())
        time.sleep(0.005)
    pytest.fail(f"job {job_id} was not promoted within {timeout}s")


def test_delayed_jobs_are_promoted_on_time_while_a_dense_schedule_expands(
    conn: Conn,
    start_scanner: Callable[..., RunningScanner],  # noqa: F811
) -> None:
    """About 4 s: five delayed jobs, each promoted while passes of a seconds schedule run back to back."""
    add_schedule(conn, "dense", "* * * * * *", horizon=timedelta(days=7))
    start_scanner("prompt", lease=10.0, expansion_interval=0.05, listen=True)
    wait_for(lambda: schedule(conn, "dense")["expanded_until"] is not None, 30, what="the first expansion")
    late = []
    for _ in range(5):
        run_at = db_now(conn) + timedelta(seconds=0.7)
        job_id = conn.execute("SELECT pgsched.enqueue('t.delayed', run_at => %s) AS id", [run_at]).fetchone()["id"]  # type: ignore[index]
        late.append(lateness(conn, job_id))
    # Before, promotions waited behind expansion passes: [0.21, 0.49, 0.33, 0.89, 0.97] s late (median 0.49).
    # The median, not the worst: one promotion of five may be late on a machine whose cores are busy.
    assert sorted(late)[2] < 0.2, f"promotions waited for expansion passes: {late}"
