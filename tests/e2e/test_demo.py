"""`pgsched demo` end to end: real worker processes against a fresh database, summed up as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

pytestmark = pytest.mark.slow


def run_demo(dsn: str, jobs: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGSCHED_DSN", "DATABASE_URL")}
    proc = subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", dsn, "demo", "--jobs", str(jobs), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def test_demo_accounts_for_every_job(dsn: str) -> None:
    summary = run_demo(dsn, 300)

    assert summary["ok"] is True, summary["problems"]
    assert summary["total"] == 300
    assert summary["completed"] + summary["dead"] == 300
    assert summary["dead"] == 1
    assert summary["per_task"]["demo.always_fails"] == {
        "jobs": 1, "completed": 0, "dead": 1, "cancelled": 0, "retried": 1, "attempts": 3,
    }  # fmt: skip
    assert summary["retried"] >= 1
    flaky = summary["per_task"]["demo.flaky"]
    assert flaky["completed"] == flaky["jobs"] == flaky["retried"] >= 1
    assert summary["lag_p50_s"] is not None
    assert summary["lag_p50_s"] <= summary["lag_p99_s"]
    assert summary["throughput_per_s"] > 0
    assert [w["exit_code"] for w in summary["workers"]] == [0, 0]

    with psycopg.connect(dsn, autocommit=True) as conn:
        dead = [r[0] for r in conn.execute("SELECT id FROM pgsched.dead_letters ORDER BY id").fetchall()]
        active = conn.execute("SELECT count(*) FROM pgsched.jobs").fetchone()
        workers = conn.execute("SELECT count(*) FROM pgsched.workers").fetchone()
    assert dead == summary["dead_job_ids"]
    assert active == (0,), "jobs were left behind"
    assert workers == (0,), "the workers did not unregister on SIGTERM"


def test_demo_runs_again_and_counts_only_its_own_jobs(dsn: str) -> None:
    first = run_demo(dsn, 100)
    second = run_demo(dsn, 120)

    assert first["run"] != second["run"]
    assert (second["total"], second["completed"], second["dead"]) == (120, 119, 1)
    assert second["ok"] is True, second["problems"]
    assert set(first["dead_job_ids"]).isdisjoint(second["dead_job_ids"])
