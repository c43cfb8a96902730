"""ctx.step / ctx.step_async: finished steps are not run again when the job runs again; a stale run cannot record."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import class_row

from pgsched import App, JobContext, LeaseLost
from pgsched.core.job import ClaimedJob
from pgsched.runtime.journal import ConnJournal
from tests.e2e.clirun import ROOT, command, environment
from tests.integration.conftest import wait_for, wait_state

Conn = psycopg.Connection[dict[str, Any]]
LEASE = 3.0


def _lines(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(p), int(a)) for p, a in (line.split() for line in path.read_text().splitlines() if line.strip())]


def _worker(dsn: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*command(), "worker", "--app", "tests.integration.steps_app:app", "--lease", str(LEASE),
         "--poll-interval", "0.2", "--shutdown-timeout", "2"],
        env=environment({"PGSCHED_DSN": dsn}),
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_a_worker_killed_during_step_3_leaves_steps_1_and_2_done_once(dsn: str, conn: Conn, tmp_path: Path) -> None:
    """Two worker processes and a lease expiry (3 s lease): about 10 s on a quiet machine."""
    folder = tmp_path / "effects"
    folder.mkdir()
    first = _worker(dsn, tmp_path / "w1.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        job_id = conn.execute(
            "SELECT pgsched.enqueue('steps.three', %s) AS id", [psycopg.types.json.Jsonb({"folder": str(folder)})]
        ).fetchone()["id"]  # type: ignore[index]
        wait_for(lambda: _lines(folder / "three"), 30, what="step 3 started")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = _worker(dsn, tmp_path / "w2.log")
        row = wait_state(conn, job_id, "completed", "dead", timeout=60)
        assert row["state"] == "completed", row
        assert row["result"] == ["one done", "two done", "three done"]
        # Side effects: steps 1 and 2 ran once (attempt 1); step 3 ran in both attempts (killed in the first).
        assert [a for _, a in _lines(folder / "one")] == [1]
        assert [a for _, a in _lines(folder / "two")] == [1]
        assert [a for _, a in _lines(folder / "three")] == [1, 2]
        assert _lines(folder / "three")[1][0] == second.pid
        # The checker's rules: nothing lost, no effect twice, the rerun under a higher attempt and token.
        steps = {s["name"]: s for s in row["steps"]}
        assert (steps["one"]["attempt"], steps["two"]["attempt"], steps["three"]["attempt"]) == (1, 1, 2)
        assert steps["three"]["token"] > steps["one"]["token"] == steps["two"]["token"]
        assert row["attempt"] == 2
        assert row["lease_token"] == steps["three"]["token"]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_a_failed_run_does_not_redo_its_finished_steps(app: App, conn: Conn) -> None:
    calls: list[str] = []

    def effect(name: str) -> dict[str, str]:
        calls.append(name)
        return {"step": name}

    @app.task(name="steps.flaky", retry_backoff=0.01)
    def flaky(ctx: JobContext) -> list[Any]:
        a = ctx.step("a", effect, "a")
        b = ctx.step("b", effect, "b")
        if ctx.attempt == 1:
            raise RuntimeError("boom after two steps")
        return [a, b, ctx.step("c", effect, "c")]

    handle = flaky.enqueue()
    app.drain()
    wait_for(lambda: app.drain().ran, 15, what="the retry")
    assert handle.wait(5) == [{"step": "a"}, {"step": "b"}, {"step": "c"}]
    assert calls == ["a", "b", "c"]


def test_steps_in_an_async_handler_on_a_worker(app: App, conn: Conn, start_worker: Any) -> None:
    calls: list[str] = []

    async def fetch(n: int) -> tuple[int, int]:
        await asyncio.sleep(0)
        calls.append("fetch")
        return (n, n * 2)

    def total(pair: list[int]) -> int:
        calls.append("total")
        return sum(pair)

    @app.task(name="steps.async")
    async def run(ctx: JobContext, n: int) -> int:
        pair = await ctx.step_async("fetch", fetch, n)
        assert pair == [n, n * 2]  # the JSON round trip, on the first run as on a replay
        return int(await ctx.step_async("total", total, pair))

    start_worker()
    handle = run.enqueue(n=5)
    assert handle.wait(30) == 15
    assert calls == ["fetch", "total"]
    row = wait_state(conn, handle.id, "completed")
    assert [(s["name"], s["result"]) for s in row["steps"]] == [("fetch", [5, 10]), ("total", 15)]


def test_a_stale_run_cannot_record_a_step_or_read_the_new_ones(app: App, conn: Conn) -> None:
    job_id = app.enqueue("steps.any")
    with psycopg.connect(app.dsn, autocommit=True) as db:
        claim = (
            "SELECT id, shard, queue, task, args, attempt, max_attempts, lease_token, idempotency_key, run_at,"
            " priority, tenant, created_at, lease_expires_at, trace_context"
            " FROM pgsched.claim('w', ARRAY['default'], 1, interval '30 seconds', '{}', NULL, %s)"
        )
        now = conn.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
        with db.cursor(row_factory=class_row(ClaimedJob)) as cur:
            [old] = cur.execute(claim, [now]).fetchall()
            db.execute("SELECT pgsched.expire_leases(p_now => %s)", [now + timedelta(minutes=5)])
            [new] = cur.execute(claim, [now + timedelta(minutes=5)]).fetchall()
        assert old.id == new.id == job_id
        stale = JobContext(job=old, worker="w", _journal=ConnJournal(db))
        current = JobContext(job=new, worker="w", _journal=ConnJournal(db))
        with pytest.raises(LeaseLost):
            stale.step("x", lambda: 1)
        assert current.step("x", lambda: 2) == 2
        current_again = JobContext(job=new, worker="w", _journal=ConnJournal(db))
        assert current_again.step("x", lambda: 3) == 2  # recorded: not run again


def test_bad_steps_are_refused_before_anything_is_written(app: App, conn: Conn) -> None:
    errors: list[str] = []

    @app.task(name="steps.bad")
    def bad(ctx: JobContext) -> None:
        for name, fn in (("", lambda: 1), ("x" * 201, lambda: 1), ("obj", object), ("nan", lambda: float("nan"))):
            try:
                ctx.step(name, fn)
            except (ValueError, TypeError) as exc:
                errors.append(str(exc))

    handle = bad.enqueue()
    app.drain()
    assert handle.wait(5) is None
    assert len(errors) == 4
    assert "step name" in errors[0]
    assert "must be JSON" in errors[2]
    row = wait_state(conn, handle.id, "completed")
    assert row["steps"] is None
