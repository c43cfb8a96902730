"""`pgsched worker` comes back by itself once abandoned handler threads pile up: it re-executes in place
(same PID, same arguments), or with --recycle exit, exits 75 for its supervisor."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from psycopg.types.json import Jsonb

from tests.e2e.clirun import ROOT, command, connect, current, environment
from tests.integration.conftest import wait_for

APP = "tests.integration.timeouts_app:app"


def _worker(dsn: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    args = [*command(), "worker", "--app", APP, "--concurrency", "2", "--max-abandoned-threads", "1"]
    args += ["--poll-interval", "0.2", "--shutdown-timeout", "1", *extra]
    return subprocess.Popen(
        args, env=environment({"PGSCHED_DSN": dsn}), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log.open("wb")
    )


def _enqueue(dsn: str, task: str, args: dict[str, object]) -> int:
    with connect(dsn) as conn:
        row = conn.execute("SELECT pgsched.enqueue(%s, %s, max_attempts => 1) AS id", [task, Jsonb(args)]).fetchone()
        assert row is not None
        return int(row["id"])


def _state(dsn: str, job_id: int) -> dict[str, object] | None:
    with connect(dsn) as conn:
        return current(conn, job_id)


def test_a_recycled_worker_re_executes_itself_in_place(dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    proc = _worker(dsn, log)
    try:
        hung = _enqueue(dsn, "to.hang", {"seconds": 600})
        wait_for(lambda: (_state(dsn, hung) or {}).get("state") == "dead", 60, what="the hung job to time out")
        assert (_state(dsn, hung) or {})["error"] == "timed out after 1 s"
        wait_for(lambda: "re-executing the worker in place" in log.read_text(), 60, what="the worker to recycle")
        after = _enqueue(dsn, "to.pid", {})
        wait_for(lambda: (_state(dsn, after) or {}).get("state") == "completed", 60, what="a job after the recycle")
        assert (_state(dsn, after) or {})["result"] == proc.pid  # the same process, a fresh image
        assert log.read_text().count(" started on ") == 2  # started twice: before and after the re-exec
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, log.read_text()


def test_with_recycle_exit_the_worker_exits_75(dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    proc = _worker(dsn, log, "--recycle", "exit")
    try:
        hung = _enqueue(dsn, "to.hang", {"seconds": 600})
        code = proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 75, log.read_text()
    assert (_state(dsn, hung) or {})["error"] == "timed out after 1 s"
