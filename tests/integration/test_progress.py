"""ctx.progress(): reports from sync and async handlers, rate-limited to one statement a second, in the row and
history, on JobHandle.progress() and the worker's metrics."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg

from pgsched import App, JobContext
from tests.integration.conftest import Running, wait_for, wait_state


def test_a_tight_loop_of_reports_costs_at_most_a_statement_a_second(
    app: App, conn: psycopg.Connection[Any], start_worker: Any
) -> None:
    """Runs the handler for about 4 s: the rate limit shows only over several seconds of reports."""
    calls: list[float] = []
    release = threading.Event()

    @app.task(name="busy")
    def busy(ctx: JobContext) -> None:
        n = 0
        started = time.monotonic()
        while not release.is_set() or n == 0:
            n += 1
            ctx.progress((n % 1000) / 1000, note=f"item {n}")
        calls.append(n / (time.monotonic() - started))

    worker: Running = start_worker()
    handle = busy.enqueue()
    wait_for(lambda: handle.progress() is not None, 15, what="the first progress report")
    journal = worker.worker._executor.journal
    assert journal is not None
    first = journal.statements
    began = time.monotonic()
    seen = wait_for(lambda: handle.progress(), what="a report")
    assert 0 <= seen.fraction <= 1
    assert (seen.note or "").startswith("item ")
    # Reports keep coming in a tight loop; three more statements take at least two of the one-second pauses.
    wait_for(lambda: journal.statements >= first + 3, 20, what="three more progress statements")
    window = time.monotonic() - began
    assert window >= 1.9, f"3 statements in {window:.2f}s"
    release.set()
    wait_state(conn, handle.id, "completed")
    assert calls
    assert calls[0] >= 10_000, f"only {calls[0]:.0f} reports a second"
    row = conn.execute("SELECT progress_note FROM pgsched.job_history WHERE id = %s", [handle.id]).fetchone()
    assert row is not None
    assert row["progress_note"].startswith("item ")


def test_an_async_handler_reports_and_the_last_report_outlives_the_run(
    app: App, conn: psycopg.Connection[Any], start_worker: Any
) -> None:
    go = threading.Event()

    @app.task(name="steps.async_report")
    async def report(ctx: JobContext) -> str:
        ctx.progress(0.5, "halfway")
        while not go.is_set():
            await asyncio.sleep(0.01)
        ctx.progress(1.0, "done")
        return "ok"

    worker: Running = start_worker()
    handle = report.enqueue()
    halfway = wait_for(lambda: handle.progress(), 15, what="the report")
    assert (halfway.fraction, halfway.note) == (0.5, "halfway")
    families = {f.name: f for f in worker.worker.metrics.collect()}
    [sample] = families["pgsched_worker_job_progress"].samples
    assert sample.labels == {"queue": "default", "task": "steps.async_report", "job_id": str(handle.id)}
    assert sample.value == 0.5
    go.set()
    assert handle.wait(15) == "ok"
    last = handle.progress()
    assert last is not None
    assert (last.fraction, last.note) == (1.0, "done")


def test_bad_reports_raise_in_the_handler_and_fail_the_run(app: App, conn: psycopg.Connection[Any]) -> None:
    errors: list[str] = []

    @app.task(name="bad_progress")
    def bad(ctx: JobContext) -> None:
        for fraction, note in ((1.5, None), (-1, None), (float("nan"), None), (0.5, "x" * 1001), (True, None)):
            try:
                ctx.progress(fraction, note)
            except (ValueError, TypeError) as exc:
                errors.append(str(exc))
        ctx.progress(0.25)

    handle = bad.enqueue()
    app.drain()
    assert len(errors) == 5
    assert "from 0 to 1" in errors[0]
    assert "1000 characters" in errors[3]
    last = handle.progress()
    assert last is not None
    assert last.fraction == 0.25
