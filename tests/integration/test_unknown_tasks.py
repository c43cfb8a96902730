"""Issue 21.5: a worker never kills a job of a task it does not know. Two applications share a queue: the job goes
back to the queue (its attempts intact, its dependents untouched) for a worker that knows the task, shows as
unserved meanwhile, and goes dead only once no live worker has registered the task for unserved_task_timeout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from pgsched import App
from pgsched.db import queries
from tests.integration.conftest import Running, job, wait_all, wait_for, wait_state

StartWorker = Callable[..., Running]


def test_two_applications_sharing_a_queue_each_run_their_own_jobs(
    app: App, dsn: str, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    billing = app  # the first application: its worker starts first and claims everything due

    @billing.task(name="billing.charge")
    def charge(n: int) -> int:
        return n

    mailer = App(dsn)

    @mailer.task(name="mailer.send", max_attempts=1)
    def send(n: int) -> int:
        return n

    try:
        theirs = [mailer.enqueue("mailer.send", {"n": i}, max_attempts=1) for i in range(5)]
        after = mailer.enqueue("mailer.send", {"n": 99}, depends_on=[theirs[0]])
        mine = [charge.enqueue(i) for i in range(5)]
        first = start_worker(billing, name="billing-worker")
        wait_all(conn, mine, "completed", timeout=30)
        wait_for(
            lambda: all((job(conn, i) or {}).get("attempt", 0) >= 1 for i in theirs),
            30,
            what="the billing worker to claim each of the mailer's jobs",
        )
        assert first.worker.counts["passed_over"] >= 5
        for job_id in theirs:
            row = job(conn, job_id)
            assert row is not None
            assert row["state"] in ("scheduled", "available"), row
            assert row["max_attempts"] > row["attempt"], row  # its one attempt is still there
        # shown as unserved: no live worker has registered mailer.send
        unserved = wait_for(
            lambda: conn.execute(queries.UNSERVED_TASKS).fetchall(), 30, what="the mailer's jobs shown unserved"
        )
        assert [(u["queue"], u["task"]) for u in unserved] == [("default", "mailer.send")]
        assert unserved[0]["jobs"] >= 1
        assert job(conn, after)["state"] == "waiting"  # type: ignore[index]  # not cancelled

        start_worker(mailer, name="mailer-worker")
        wait_all(conn, [*theirs, after], "completed", timeout=60)
        rows = conn.execute(
            "SELECT DISTINCT leased_by FROM pgsched.job_history WHERE id = ANY(%s)", [[*theirs, after]]
        ).fetchall()
        assert [r["leased_by"] for r in rows] == ["mailer-worker"]
        assert conn.execute(queries.UNSERVED_TASKS).fetchall() == []
        assert conn.execute("SELECT count(*) AS n FROM pgsched.job_history WHERE state = 'dead'").fetchone() == {"n": 0}
    finally:
        mailer.close()


def test_a_job_no_worker_knows_goes_dead_after_the_unserved_task_timeout(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    conn.execute("UPDATE pgsched.config SET unserved_task_timeout = '1 second'")

    @app.task(name="known")
    def known() -> None: ...

    job_id = app.enqueue("typo.task", {}, max_attempts=5)
    running = start_worker()
    dead = wait_state(conn, job_id, "dead", timeout=30)
    assert dead["error"] == "unknown task 'typo.task': no live worker has registered it for 00:00:01"
    wait_for(lambda: running.worker.counts["dead"] == 1, what="dead counted")
