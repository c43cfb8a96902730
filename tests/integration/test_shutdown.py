"""Stopping a worker: no new claims, short jobs finish, the rest are handed back, nothing stays leased."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsched import App, JobContext
from pgsched.runtime.worker import Worker, WorkerOptions
from tests.integration.conftest import Running, events, job, wait_all, wait_for, wait_state

StartWorker = Callable[..., Running]
ROOT = Path(__file__).resolve().parents[2]


def running_jobs(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) AS n FROM pgsched.jobs WHERE state = 'running'").fetchone()
    assert row is not None
    return int(row["n"])


def handed_back(conn: psycopg.Connection[Any], job_id: int, max_attempts: int) -> None:
    """The job is waiting again, its run not counted against its attempts."""
    row = job(conn, job_id)
    assert row is not None
    assert row["state"] == "available", row
    assert row["attempt"] == 1
    assert row["max_attempts"] == max_attempts + 1
    assert row["lease_token"] is None
    kinds = [e["kind"] for e in events(conn, job_id)]
    assert kinds == ["claimed", "released"], kinds


def test_stop_lets_short_jobs_finish_and_hands_back_the_rest(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    started: dict[str, threading.Event] = {k: threading.Event() for k in ("short", "deaf", "polite", "async")}

    finish_short = threading.Event()

    @app.task(name="sd.short", max_attempts=3)
    def short() -> str:
        started["short"].set()
        finish_short.wait(5)
        return "done"

    @app.task(name="sd.deaf", max_attempts=3)
    def deaf() -> None:
        started["deaf"].set()
        time.sleep(2.5)  # ignores every request to stop

    @app.task(name="sd.polite", max_attempts=3)
    def polite(ctx: JobContext) -> None:
        started["polite"].set()
        ctx.sleep(10)
        ctx.raise_if_cancelled()

    @app.task(name="sd.async", max_attempts=3)
    async def in_loop() -> None:
        started["async"].set()
        await asyncio.sleep(10)

    @app.task(name="sd.later", max_attempts=3)
    def later() -> None: ...

    ids = {name: t.enqueue() for name, t in (("short", short), ("deaf", deaf), ("polite", polite), ("async", in_loop))}
    running = start_worker(concurrency=4, prefetch=4, shutdown_timeout=0.8)
    for name, event in started.items():
        assert event.wait(5), name
    waiting = later.enqueue()  # leased ahead of a free slot, never started
    wait_state(conn, waiting, "running")

    began = time.monotonic()
    running.worker.stop()
    not_claimed = later.enqueue()
    wait_state(conn, waiting, "available")  # handed back first, as it never started
    finish_short.set()  # finishes within the shutdown timeout
    running.join(timeout=10)
    took = time.monotonic() - began
    assert 0.8 <= took < 0.8 + 2.0, took

    assert wait_state(conn, ids["short"], "completed")["result"] == "done"
    for name in ("deaf", "polite", "async"):
        handed_back(conn, ids[name], 3)
    handed_back(conn, waiting, 3)
    assert running_jobs(conn) == 0
    row = job(conn, not_claimed)
    assert row is not None
    assert (row["state"], row["attempt"]) == ("available", 0)
    assert conn.execute("SELECT count(*) AS n FROM pgsched.workers").fetchone() == {"n": 0}


def test_a_handed_back_job_runs_again_with_its_attempts_intact(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    started = threading.Event()

    @app.task(name="sd.again", max_attempts=1)
    def again(ctx: JobContext) -> int:
        if ctx.attempt == 1:
            started.set()
            ctx.sleep(10)
            ctx.raise_if_cancelled()
        return ctx.attempt

    job_id = again.enqueue()
    first = start_worker(shutdown_timeout=0.2)
    assert started.wait(5)
    first.stop()
    handed_back(conn, job_id, 1)
    start_worker()
    done = wait_state(conn, job_id, "completed")
    assert (done["result"], done["attempt"], done["max_attempts"]) == (2, 2, 2)


def test_burst_exits_when_no_due_work_remains(app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="burst.job")
    def work(i: int) -> int:
        return i

    ids = app.enqueue_many([work.job(i) for i in range(25)])
    future = work.using(delay=timedelta(hours=1)).enqueue(-1)
    worker = Worker(app, WorkerOptions(burst=True, concurrency=4, install_signal_handlers=False))
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    thread.start()
    thread.join(15)
    assert not thread.is_alive(), "--burst did not exit"
    assert result == [0]
    wait_all(conn, ids, "completed", timeout=1)
    assert job(conn, future)["state"] == "scheduled"  # type: ignore[index]
    assert running_jobs(conn) == 0


def test_burst_on_an_empty_queue_exits_at_once(app: App) -> None:
    worker = Worker(app, WorkerOptions(burst=True, install_signal_handlers=False))
    began = time.monotonic()
    assert worker.run() == 0
    assert time.monotonic() - began < 3


def test_jobs_due_soon_are_promoted_by_the_worker_itself(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="soon.job")
    def soon() -> None: ...

    start_worker(poll_interval=0.2)
    job_id = soon.using(delay=timedelta(seconds=0.5)).enqueue()
    assert job(conn, job_id)["state"] == "scheduled"  # type: ignore[index]
    done = wait_state(conn, job_id, "completed", timeout=5)
    lateness = done["started_at"] - done["run_at"]
    assert timedelta(0) <= lateness < timedelta(seconds=1.0)


# -- the CLI in a subprocess: real signals -------------------------------------------


class CliWorker:
    """`pgsched worker` (or another command: `run`) in a subprocess, its log collected line by line."""

    def __init__(self, dsn: str, *args: str, command: str = "worker") -> None:
        env = {**os.environ, "PGSCHED_DSN": dsn, "PYTHONPATH": str(ROOT)}
        env.pop("PGSCHED_APP", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pgsched",
                command,
                "--app",
                "tests.integration.cli_app:app",
                *(("--lease", "3") if command == "worker" else ()),
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_log(self, text: str, timeout: float = 10.0) -> None:
        wait_for(lambda: text in self.output, timeout, what=lambda: f"{text!r} in the worker's log:\n{self.output}")

    def signal(self, signum: int, then_log: str) -> None:
        self.proc.send_signal(signum)
        self.wait_for_log(then_log)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code


@pytest.fixture
def cli_worker(dsn: str) -> Iterator[Callable[..., CliWorker]]:
    started: list[CliWorker] = []

    def start(*args: str, command: str = "worker") -> CliWorker:
        started.append(CliWorker(dsn, *args, command=command))
        return started[-1]

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(10)


def test_sigterm_lets_the_running_job_finish_and_claims_nothing_more(
    app: App, conn: psycopg.Connection[Any], cli_worker: Callable[..., CliWorker]
) -> None:
    job_id = app.enqueue("cli.nap", {"seconds": 0.8})
    worker = cli_worker("--shutdown-timeout", "10")
    wait_state(conn, job_id, "running", timeout=15)
    worker.signal(signal.SIGTERM, then_log="no new claims")
    after = app.enqueue("cli.nap", {"seconds": 0})
    assert worker.wait(timeout=10) == 0, worker.output
    assert wait_state(conn, job_id, "completed")["result"] == 0.8
    row = job(conn, after)
    assert row is not None
    assert (row["state"], row["attempt"]) == ("available", 0), worker.output
    assert running_jobs(conn) == 0


def test_a_second_sigterm_hands_back_at_once(
    app: App, conn: psycopg.Connection[Any], cli_worker: Callable[..., CliWorker]
) -> None:
    job_id = app.enqueue("cli.nap", {"seconds": 30}, max_attempts=2)
    worker = cli_worker("--shutdown-timeout", "30")
    wait_state(conn, job_id, "running", timeout=15)
    worker.signal(signal.SIGTERM, then_log="no new claims")
    with pytest.raises(subprocess.TimeoutExpired):
        worker.proc.wait(timeout=0.5)  # the first signal waits for the job
    began = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    # At once: the job is back in the queue long before the 30 s shutdown timeout the first signal
    # waits for (measured in the database; 10 s leaves a loaded machine room and still tells the two apart).
    wait_for(lambda: (job(conn, job_id) or {}).get("state") == "available", timeout=10.0, what="the hand-back")
    assert time.monotonic() - began < 10.0, worker.output
    assert worker.wait(timeout=10) == 0, worker.output
    handed_back(conn, job_id, 2)
    assert running_jobs(conn) == 0


def test_signal_handlers_are_restored_after_the_worker_returns(dsn: str, tmp_path: Path) -> None:
    script = tmp_path / "burst_then_wait.py"
    script.write_text(
        "import time\n"
        "from tests.integration.cli_app import app\n"
        "assert app.run_worker(burst=True) == 0\n"
        "print('worker returned', flush=True)\n"
        "time.sleep(30)\n"
    )
    env = {**os.environ, "PGSCHED_DSN": dsn, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "worker returned\n"
        proc.send_signal(signal.SIGINT)  # Ctrl-C must work again once the worker is done
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err
    assert proc.returncode != 0
