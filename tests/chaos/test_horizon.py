"""Scenario 10: a long transaction elsewhere (REPEATABLE READ, one SELECT, left open) pins the vacuum horizon
during a load.

pgsched keeps working (jobs keep completing at the offered rate), dead rows
pile up behind the snapshot, and `pgsched doctor` fails its xmin horizon
check naming the blocking backend's pid; once the transaction ends, the
check passes again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psycopg
import pytest

from tests.chaos.conftest import Env, Producer
from tests.chaos.procs import REPO


def doctor(env: Env, *args: str) -> tuple[int, list[dict[str, object]]]:
    out = subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", env.dsn, "doctor", "--json", *args],
        cwd=REPO,
        env=env.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.returncode, json.loads(out.stdout)


def by_name(checks: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(c["check"]): c for c in checks}


def dead_rows(env: Env) -> int:
    return int(env.scalar("SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = 'pgsched'"))


def run_horizon(env: Env, *, hold_s: float, rate: float) -> None:
    env.scanner("scanner-1", lease=3.0)
    for i in range(2):
        env.worker(f"w{i}", concurrency=4, lease=5.0, poll=0.5)
    producer = Producer(env.dsn, "load", rate=rate, batch=5, sleep=0.0).start()
    env.closers.append(producer.stop)
    time.sleep(2.0)
    blocker = psycopg.connect(env.dsn, application_name="chaos-horizon-holder")
    env.closers.append(blocker.close)
    blocker.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    blocker.execute("SELECT 1")
    pid = blocker.info.backend_pid
    began = env.scalar("SELECT clock_timestamp()")
    samples: list[tuple[float, int]] = []
    found_at: float | None = None
    first = time.monotonic()
    code, checks = 0, []
    while time.monotonic() - first < hold_s:
        time.sleep(min(5.0, hold_s / 4))
        code, checks = doctor(env, "--max-xact-age", "3s")
        horizon = by_name(checks)["xmin horizon"]
        if horizon["status"] == "fail" and f"pid {pid}" in str(horizon["detail"]) and found_at is None:
            found_at = time.monotonic() - first
        samples.append((time.monotonic() - first, dead_rows(env)))
    assert code == 1, f"doctor exited {code} while the horizon was pinned: {checks}"
    horizon = by_name(checks)["xmin horizon"]
    assert horizon["status"] == "fail"
    assert f"pid {pid}" in str(horizon["detail"]), horizon
    done_during = env.scalar(
        "SELECT count(*) FROM pgsched.job_history WHERE finished_at > %s AND state = 'completed'", [began]
    )
    blocker.rollback()
    blocker.close()
    after_code, after = doctor(env, "--max-xact-age", "3s")
    acked = producer.stop()
    env.wait_finished(acked, 60, "the load")
    with env.connect() as conn:
        conn.execute("VACUUM pgsched.jobs")
    vacuumed = dead_rows(env)
    report = env.check(
        "10. a long transaction pins the xmin horizon",
        acked,
        recovery_s=found_at,
        notes={
            "held / offered load": f"{hold_s:.0f}s / {rate:.0f} jobs/s",
            "completed while pinned": done_during,
            "doctor names the holder": f"pid {pid} after {found_at or 0:.1f}s (recovery time = detection)",
            "dead rows: pinned (first -> last) / vacuumed": f"{samples[0][1]} -> {samples[-1][1]} / {vacuumed}",
            "doctor after it ended": f"exit {after_code}, horizon {by_name(after)['xmin horizon']['status']}",
        },
    )
    assert report.ok
    assert done_during >= rate * hold_s * 0.7, "pgsched must keep working while the horizon is pinned"
    assert by_name(after)["xmin horizon"]["status"] == "ok"


def test_long_transaction_quick(env: Env) -> None:
    run_horizon(env, hold_s=9.0, rate=50.0)


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_long_transaction(env: Env) -> None:
    run_horizon(env, hold_s=600.0, rate=100.0)
