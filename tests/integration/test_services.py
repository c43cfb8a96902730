"""Issue 10.6: service jobs run until cancelled, come back after their worker dies, and run once per key."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsched import App, JobContext, Task
from tests.e2e.clirun import ROOT, Cli, command, environment
from tests.integration.conftest import wait_for, wait_state

Conn = psycopg.Connection[dict[str, Any]]
LEASE = 3.0


def _starts(path: Path) -> list[tuple[int, int]]:
    """(pid, attempt) of each start the service wrote."""
    if not path.exists():
        return []
    return [(int(p), int(a)) for p, a in (line.split() for line in path.read_text().splitlines() if line.strip())]


def _worker(dsn: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*command(), "worker", "--app", "tests.integration.service_app:app", "--lease", str(LEASE),
         "--poll-interval", "0.2", "--shutdown-timeout", "2"],
        env=environment({"PGSCHED_DSN": dsn}),
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_a_service_whose_worker_is_killed_restarts_on_another_within_a_lease(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    workers = [_worker(dsn, tmp_path / f"w{i}.log") for i in range(2)]
    try:
        out = tmp_path / "starts"
        job_id = conn.execute(
            "SELECT pgsched.enqueue_service('svc.beat', %s, idempotency_key => 'beat', max_attempts => 1) AS id",
            [psycopg.types.json.Jsonb({"path": str(out)})],
        ).fetchone()["id"]  # type: ignore[index]
        first = wait_for(lambda: _starts(out), 30, what="the service started")[0]
        victim = next(w for w in workers if w.pid == first[0])
        victim.kill()
        victim.wait(10)
        killed = time.monotonic()
        second = wait_for(lambda: _starts(out)[1:], 30, what="the service restarted")[0]
        took = time.monotonic() - killed
        assert second[0] != first[0]
        assert second[1] == 2  # attempt 2, though max_attempts is 1: an expiry never sends a service dead
        # A lease, plus the survivor's expiry check (every lease/4, at least 1 s) and slack for a busy machine.
        assert took < LEASE + max(1.0, LEASE / 4) + 5, f"restart took {took:.1f}s"
        row = conn.execute("SELECT state, service, leased_by FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
        assert row is not None
        assert (row["state"], row["service"]) == ("running", True)
        assert conn.execute(
            "SELECT pgsched.enqueue_service('svc.beat', %s, idempotency_key => 'beat') AS id",
            [psycopg.types.json.Jsonb({"path": str(out)})],
        ).fetchone() == {"id": job_id}
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(10)


def test_a_service_runs_until_cancelled_once_per_key(app: App, conn: Conn, start_worker: Any) -> None:
    started: list[int] = []

    @app.service(name="svc.loop")
    def loop(ctx: JobContext, name: str) -> None:
        started.append(ctx.id)
        while not ctx.should_stop:
            ctx.sleep(0.1)

    worker = start_worker(queues=["default"], lease=5, shutdown_timeout=60)
    job = loop.using(idempotency_key="loop-1").enqueue(name="a")
    wait_state(conn, job.id, "running", timeout=30)
    wait_for(lambda: started, 30, what="the service's handler started")
    assert loop.using(idempotency_key="loop-1").enqueue(name="a").id == job.id
    assert app.enqueue("svc.loop", {"name": "a"}, idempotency_key="loop-1").id == job.id

    listed = Cli(app.dsn).ok("jobs", "list", "--services", "--json").json()
    assert [(j["id"], j["state"], j["service"]) for j in listed] == [(job.id, "running", True)]
    assert listed[0]["uptime_s"] >= 0
    table = Cli(app.dsn).ok("jobs", "list").out
    assert "uptime" in table
    assert str(job.id) in table

    assert app.cancel(job.id) == "cancel_requested"
    row = wait_state(conn, job.id, "cancelled", "completed", "dead", timeout=30)
    assert (row["state"], row["service"]) == ("cancelled", True)
    assert started == [job.id]
    again = loop.using(idempotency_key="loop-1").enqueue(name="a")  # the key is free once it ended
    assert again.id != job.id
    wait_for(lambda: again.id in started, 30, what="the new service's handler started")
    # A graceful stop does not wait out the shutdown timeout for a service: it is handed back at once.
    stopping = time.monotonic()
    worker.stop(timeout=20)
    assert time.monotonic() - stopping < 20
    row = wait_state(conn, again.id, "available", timeout=5)
    assert row["attempt"] == 1


def test_a_service_takes_no_timeout_and_is_not_batched(app: App) -> None:
    with pytest.raises(TypeError):
        app.service(name="svc.t", timeout=5)  # type: ignore[call-arg]

    @app.service(name="svc.x")
    def x() -> None: ...

    assert x.service
    assert repr(x) == "<Service 'svc.x' queue='default'>"
    with pytest.raises(ValueError, match="enqueue services one at a time"):
        app.enqueue_many([x.job()])

    @app.task(name="svc.plain")
    def plain() -> None: ...

    assert not plain.job().service
    job = plain.using(service=True, idempotency_key="p").enqueue()
    assert plain.using(service=True, idempotency_key="p").enqueue().id == job.id
    assert app.job(job.id).status().state == "available"
    with pytest.raises(ValueError, match="takes no timeout"):
        Task(app, plain.fn, name="svc.bad", timeout=1.0, service=True)
