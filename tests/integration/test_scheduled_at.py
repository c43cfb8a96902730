"""`ctx.scheduled_at` of a schedule's occurrence is its fire time on every run: after a hand-back at
shutdown, a retry, an expired lease."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgsched import App, JobContext, Retry
from tests.integration.conftest import Running, job, wait_state
from tests.integration.test_shutdown import handed_back
from tests.scheduling.helpers import expand, jobs

Conn = psycopg.Connection[dict[str, Any]]


def one_occurrence(conn: Conn, task: str) -> tuple[int, datetime]:
    """A schedule's occurrence fired at the last whole hour (filed by a scanner pass just before it)."""
    now = conn.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
    fire = now.replace(minute=0, second=0, microsecond=0)
    conn.execute(
        "SELECT pgsched.upsert_schedule(name => 'hourly', cron => '0 * * * *', task => %s, queue => 'sched',"
        " misfire_grace => '2 hours')",
        [task],
    )
    # Expanded up to now (so it is promoted as an on-time occurrence), decided before it fired.
    assert (
        expand(conn, "hourly", fire - timedelta(minutes=1), now + timedelta(seconds=1), fire - timedelta(minutes=1))
        == 1
    )
    (row,) = jobs(conn, "hourly")
    assert row["run_at"] == fire
    return int(row["id"]), fire


def test_a_handed_back_and_retried_occurrence_still_sees_its_fire_time(
    app: App, conn: Conn, start_worker: Callable[..., Running]
) -> None:
    seen: list[tuple[int, datetime]] = []
    started = threading.Event()

    @app.task(name="sched.tick", max_attempts=5)
    def tick(ctx: JobContext) -> str:
        seen.append((ctx.attempt, ctx.scheduled_at))
        if ctx.attempt == 1:  # runs until the worker stops: handed back
            started.set()
            while not ctx.should_stop:
                ctx.sleep(0.05)
            return "stopped"
        if ctx.attempt == 2:
            raise Retry(0.05)
        return "done"

    job_id, fire = one_occurrence(conn, "sched.tick")
    conn.execute("SELECT pgsched.promote_due()")
    first = start_worker(queues=["sched"], shutdown_timeout=0.3)
    assert started.wait(15), (job(conn, job_id), seen)
    first.stop()
    handed_back(conn, job_id, 5)
    assert job(conn, job_id)["run_at"] == fire, "a hand-back keeps the due time"  # type: ignore[index]

    start_worker(queues=["sched"])
    assert wait_state(conn, job_id, "completed", "dead")["state"] == "completed"
    assert seen == [(1, fire), (2, fire), (3, fire)]


def test_a_released_job_keeps_its_due_time(conn: Conn) -> None:
    due = conn.execute("SELECT now() - interval '1 hour' AS t").fetchone()["t"]  # type: ignore[index]
    job_id = conn.execute("SELECT pgsched.enqueue('t', run_at => %s, queue => 'rel') AS id", [due]).fetchone()["id"]  # type: ignore[index]
    (leased,) = conn.execute("SELECT id, lease_token FROM pgsched.claim('w', ARRAY['rel'], 1, '1 minute')").fetchall()
    out = conn.execute(
        "SELECT * FROM pgsched.release(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [job_id, leased["lease_token"]]
    ).fetchall()
    assert [r["outcome"] for r in out] == ["available"]
    assert job(conn, job_id)["run_at"] == due  # type: ignore[index]
