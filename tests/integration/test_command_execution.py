"""Command jobs, part two: progress lines on stdout, resource limits (cgroups or rlimits) and what they record."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from pgsched import App, JobContext
from pgsched.cli import main
from pgsched.runtime import limits
from tests.integration.conftest import events, wait_for, wait_state
from tests.integration.test_commands import command_worker  # noqa: F401 (fixture)

Conn = psycopg.Connection[dict[str, Any]]


def test_a_command_reports_progress_by_stdout_lines(
    app: App,
    conn: Conn,
    command_worker: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    script = (
        "echo 'PGSCHED_PROGRESS 0.5 halfway there'; echo 'PGSCHED_PROGRESS 7 ignored'; echo plain;"
        f" while [ ! -e {go} ]; do sleep 0.05; done; printf 'PGSCHED_PROGRESS 1'"
        "; printf '\\n'"
    )
    command_worker()
    handle = app.enqueue_command(["sh", "-c", script])
    halfway = wait_for(lambda: handle.progress(), 30, what="the command's progress")
    assert (halfway.fraction, halfway.note) == (0.5, "halfway there")
    go.touch()
    row = wait_state(conn, handle.id, "completed", "dead")
    assert row["state"] == "completed"
    assert "PGSCHED_PROGRESS 0.5 halfway there\n" in row["result"]["stdout"]
    last = handle.progress()
    assert last is not None
    assert (last.fraction, last.note) == (1.0, None)


ALLOCATE_300_MIB = "import time; x = b'x' * (300 * 1024 * 1024); print('allocated', len(x))"
BURN_CPU = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass\n"


# The CPU quota of the program's own cgroup (v1): quota and period, in microseconds.
QUOTA = (
    'p=$(grep -E "^[0-9]+:([^:]*,)?cpu(,[^:]*)?:" /proc/self/cgroup | cut -d: -f3);'
    ' d=/sys/fs/cgroup/cpu$p; echo "$(cat $d/cpu.cfs_quota_us) $(cat $d/cpu.cfs_period_us)"'
)


def _cgroups() -> bool:
    return limits.mechanism().name != "rlimit"


def test_this_host_limits_runs_with_cgroups() -> None:
    """CI runs as root on hosts that mount the cgroup hierarchies (v1 here): runs get a cgroup each."""
    if os.geteuid() != 0 or not Path("/sys/fs/cgroup").is_dir():
        pytest.skip("cgroups need root and /sys/fs/cgroup")
    found = limits.mechanism()
    assert found.name in ("cgroup v1", "cgroup v2"), found.describe()
    assert "memory" in found.controllers or "unified" in found.controllers


def test_a_command_over_its_memory_limit_is_killed_with_the_reason(
    app: App,
    conn: Conn,
    command_worker: Any,  # noqa: F811
) -> None:
    if not _cgroups():
        pytest.skip("no writable cgroup here: the rlimit fallback is tested apart")
    command_worker()
    handle = app.enqueue_command([sys.executable, "-c", ALLOCATE_300_MIB], memory_limit=64, max_attempts=1)
    row = wait_state(conn, handle.id, "dead", "completed", timeout=60)
    started = row["started_at"]
    assert row["state"] == "dead"
    assert (row["finished_at"] - started).total_seconds() < 5
    assert row["error"] == "killed: memory limit 64 MiB exceeded"
    result = row["result"]
    assert result["oom_killed"] is True
    assert result["exit_code"] == -9
    assert result["memory_limit_mib"] == 64
    assert 0 < result["peak_memory_mib"] <= 64
    assert result["limits"] == limits.mechanism().name
    kinds = [(e["kind"], (e["detail"] or {}).get("error")) for e in events(conn, handle.id)]
    assert ("dead", "killed: memory limit 64 MiB exceeded") in kinds


def test_the_same_command_without_a_limit_completes_and_records_its_peak(
    app: App,
    conn: Conn,
    command_worker: Any,  # noqa: F811
) -> None:
    command_worker()
    handle = app.enqueue_command([sys.executable, "-c", ALLOCATE_300_MIB], memory_limit=0, max_attempts=1)
    row = wait_state(conn, handle.id, "dead", "completed", timeout=60)
    assert row["state"] == "completed", row["error"]
    result = row["result"]
    assert result["memory_limit_mib"] is None
    assert result["oom_killed"] is False
    assert result["peak_memory_mib"] >= 300
    assert result["cpu_s"] is not None


def test_a_cpu_bound_command_gets_at_most_its_cpu_limit(
    app: App,
    conn: Conn,
    command_worker: Any,  # noqa: F811
) -> None:
    if not _cgroups():
        pytest.skip("a CPU rate needs a cgroup")
    command_worker()
    handle = app.enqueue_command([sys.executable, "-c", BURN_CPU], cpu_limit=0.5, max_attempts=1)
    row = wait_state(conn, handle.id, "dead", "completed", timeout=60)
    assert row["state"] == "completed", row["error"]
    result = row["result"]
    assert result["cpu_limit"] == 0.5
    rate = result["cpu_s"] / result["duration_s"]
    assert rate <= 0.6, f"{result['cpu_s']} CPU s in {result['duration_s']} s"
    if limits.mechanism().name == "cgroup v1":  # on a busy host the rate alone proves little: read the quota
        quota = app.enqueue_command(["sh", "-c", QUOTA], cpu_limit=0.5, max_attempts=1)
        row = wait_state(conn, quota.id, "dead", "completed", timeout=60)
        assert row["result"]["stdout"] == "50000 100000\n"


def test_without_cgroups_rlimits_bound_memory_and_the_log_says_what_is_not_enforced(
    app: App,
    conn: Conn,
    command_worker: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(limits, "_found", limits.Mechanism("rlimit", {}, "test: no cgroups"))
    command_worker()
    with caplog.at_level(logging.WARNING, logger="pgsched.runtime.limits"):
        handle = app.enqueue_command(
            [sys.executable, "-c", ALLOCATE_300_MIB], memory_limit=64, cpu_limit=0.5, max_attempts=1
        )
        row = wait_state(conn, handle.id, "dead", "completed", timeout=60)
        again = app.enqueue_command(["true"], cpu_limit=0.5)
        wait_state(conn, again.id, "completed", timeout=60)
    assert row["state"] == "dead"
    assert "MemoryError" in row["result"]["stderr"]
    assert row["result"]["limits"] == "rlimit"
    warnings = [r.getMessage() for r in caplog.records if "resource limits" in r.getMessage()]
    assert len(warnings) == 2, warnings  # memory and cpu, each said once
    assert any("RLIMIT_AS" in w for w in warnings)
    assert any("cpu_limit is not enforced as a rate" in w for w in warnings)


def test_a_jobs_env_cannot_name_the_limits(
    app: App,
    conn: Conn,
    command_worker: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """PGSCHED_LIMITS in a job's env would let it write its pid into any file as the worker: it is never used."""
    target = tmp_path / "written"
    target.write_text("")
    command_worker()
    forged = json.dumps({"procs": [str(target)], "rlimits": {}})
    handle = app.enqueue_command(["sh", "-c", 'echo "[$PGSCHED_LIMITS]"'], env={"PGSCHED_LIMITS": forged})
    row = wait_state(conn, handle.id, "completed", "dead", timeout=60)
    assert row["state"] == "completed"
    assert row["result"]["stdout"] == "[]\n"  # the supervisor removed it before the program ran
    assert target.read_text() == ""


def test_doctor_reports_how_each_command_worker_limits_its_runs(
    app: App,
    conn: Conn,
    command_worker: Any,  # noqa: F811
) -> None:
    worker = command_worker()
    conn.execute("SELECT pgsched.register_worker('old-host:1:ab', resource_limits => 'rlimit (no writable cgroup)')")
    result = CliRunner().invoke(main, ["--dsn", app.dsn, "doctor", "--json"])
    checks = {c["check"]: c for c in json.loads(result.stdout)}
    check = checks["resource limits"]
    assert check["status"] == "warn"  # one worker has only rlimits
    assert check["data"]["workers"][worker.worker.name] == limits.mechanism().describe()
    assert check["data"]["workers"]["old-host:1:ab"].startswith("rlimit")
    assert "rlimits only" in check["detail"]


@pytest.fixture
def limits_app(dsn: str) -> Iterator[App]:
    """The importable app of limits_app, pointed at this test's database."""
    from tests.integration import limits_app as module

    module.app.configure(dsn)
    yield module.app
    module.app.close()


def test_a_service_in_the_process_pool_runs_under_its_memory_limit(
    conn: Conn, start_worker: Any, limits_app: App
) -> None:
    if not _cgroups():
        pytest.skip("a cgroup per run needs a writable cgroup hierarchy")
    start_worker(limits_app, concurrency=1, pool="process", app_ref="tests.integration.limits_app:app")
    hog = conn.execute(
        "SELECT pgsched.enqueue_service('limits.hog', '{\"mib\": 300}', memory_limit => 64, max_attempts => 1) AS id"
    ).fetchone()
    assert hog is not None
    row = wait_state(conn, hog["id"], "dead", "completed", timeout=60)
    assert (row["state"], row["error"]) == ("dead", "killed: memory limit 64 MiB exceeded")
    small = conn.execute(
        "SELECT pgsched.enqueue_service('limits.hog', '{\"mib\": 10}', memory_limit => 64, max_attempts => 1) AS id"
    ).fetchone()
    assert small is not None
    assert wait_state(conn, small["id"], "dead", "completed", timeout=60)["state"] == "completed"
    limit = conn.execute(
        "SELECT pgsched.enqueue_service('limits.memory', memory_limit => 128, max_attempts => 1) AS id"
    ).fetchone()
    assert limit is not None
    row = wait_state(conn, limit["id"], "dead", "completed", timeout=60)
    if limits.mechanism().name == "cgroup v1":
        assert row["result"] == str(128 * 1024 * 1024)


def test_the_python_api_refuses_bad_limits_before_any_round_trip_and_passes_good_ones(app: App, conn: Conn) -> None:
    for bad, error in ((-1, ValueError), (3, ValueError), (True, TypeError), ("512M", TypeError)):
        with pytest.raises(error, match="memory_limit"):
            app.enqueue_command(["true"], memory_limit=bad)
    for bad_cpu in (-0.5, float("nan"), 0.001, 2000):
        with pytest.raises(ValueError, match="cpu_limit"):
            app.enqueue_command(["true"], cpu_limit=bad_cpu)

    @app.service(name="svc.limited", memory_limit=256, cpu_limit=0.5)
    def limited(ctx: JobContext) -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    with pytest.raises(ValueError, match="only services"):
        plain.using(memory_limit=64).enqueue()
    with pytest.raises(ValueError, match="cpu_limit"):
        app.service(name="svc.bad", cpu_limit=-1)
    assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone() == {"n": 0}
    handle = limited.enqueue()
    own = limited.using(memory_limit=0).enqueue()  # 0: no limit
    rows = {r["id"]: r for r in conn.execute("SELECT id, memory_limit, cpu_limit FROM pgsched.jobs").fetchall()}
    assert (rows[handle.id]["memory_limit"], rows[handle.id]["cpu_limit"]) == (256, 0.5)
    assert (rows[own.id]["memory_limit"], rows[own.id]["cpu_limit"]) == (None, 0.5)


def test_groups_left_by_a_dead_worker_are_swept() -> None:
    if not _cgroups():
        pytest.skip("needs a writable cgroup hierarchy")
    found = limits.mechanism()
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = found.open(limits.RunLimits(64, 0.5), f"run-1-1-{gone.pid}", None)
    alive = found.open(limits.RunLimits(64, None), f"run-2-2-{os.getpid()}", None)
    assert all(g.path.is_dir() for g in dead.groups + alive.groups)
    assert found.sweep() >= len(dead.groups)
    assert not any(g.path.exists() for g in dead.groups)
    assert all(g.path.is_dir() for g in alive.groups)  # a live worker's run is left alone
    alive.finish(0)
    dead.finish(None)  # its groups are gone already; this closes its pipe
    assert not any(g.path.exists() for g in alive.groups)
