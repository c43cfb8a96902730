"""Which worker may claim what: labels a job requires, and paused queues."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from pgsched import App
from tests.integration.conftest import Running, job, wait_state

StartWorker = Callable[..., Running]


def test_labelled_jobs_go_only_to_workers_offering_every_label(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="route.job")
    def routed(kind: str) -> str:
        return kind

    gpu = routed.using(labels=["gpu"]).enqueue("gpu")
    gpu_ssd = routed.using(labels=["gpu", "ssd"]).enqueue("gpu+ssd")
    tpu = routed.using(labels=["tpu"]).enqueue("tpu")
    plain = routed.enqueue("plain")

    plain_worker = start_worker(name="cpu-only")
    assert wait_state(conn, plain, "completed")["leased_by"] == "cpu-only"
    # plain's claim saw every job; the labelled ones were passed over.
    for job_id in (gpu, gpu_ssd, tpu):
        row = job(conn, job_id)
        assert row is not None
        assert (row["state"], row["attempt"]) == ("available", 0)

    start_worker(name="gpu-box", labels=["gpu", "ssd"])
    assert wait_state(conn, gpu, "completed")["leased_by"] == "gpu-box"
    assert wait_state(conn, gpu_ssd, "completed")["leased_by"] == "gpu-box"
    plain_worker.stop()
    row = job(conn, tpu)
    assert row is not None
    assert (row["state"], row["attempt"]) == ("available", 0)


def test_a_paused_queue_is_not_claimed_until_resumed(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="route.queued")
    def queued() -> None: ...

    conn.execute("SELECT pgsched.pause_queue('default')")
    held = queued.enqueue()
    other = queued.using(queue="other").enqueue()
    start_worker(queues=["default", "other"])
    wait_state(conn, other, "completed")
    row = job(conn, held)
    assert row is not None
    assert (row["state"], row["attempt"]) == ("available", 0)
    assert conn.execute("SELECT pgsched.resume_queue('default') AS resumed").fetchone() == {"resumed": True}
    wait_state(conn, held, "completed")


def test_the_unserved_queues_check_reads_neither_history_nor_the_running_jobs(conn: psycopg.Connection[Any]) -> None:
    """A worker's claim loop runs it now and then: through queue_stats it read five minutes of history and
    every row version of pgsched.jobs, seconds at thousands of jobs a second, and no job was claimed meanwhile.
    It reads the ring of due jobs, the live workers' rows and, for a queue nobody serves, its due jobs."""
    from pgsched.db import queries

    plan = conn.execute(b"EXPLAIN (FORMAT JSON) " + queries.UNSERVED_QUEUES.encode()).fetchone()
    assert plan is not None
    read: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            read.add(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(next(iter(plan.values()))[0]["Plan"])
    assert not {r for r in read if r.startswith("job_history")}, read
    assert any(r.startswith("ready_s") for r in read), read
    assert "workers" in read


def test_the_unserved_queues_check_names_due_queues_nobody_serves(conn: psycopg.Connection[Any]) -> None:
    from pgsched.db import queries

    for queue in ("orphans", "orphans", "held", "served"):
        conn.execute("SELECT pgsched.enqueue('t.x', '{}', queue => %s)", (queue,))
    conn.execute("SELECT pgsched.pause_queue('held')")
    worker = "INSERT INTO pgsched.workers (name, host, pid, queues, last_seen) VALUES (%s, 'h', 1, %s, now())"
    conn.execute(worker, ("w-served", ["served"]))
    rows = conn.execute(queries.UNSERVED_QUEUES).fetchall()
    assert [(r["queue"], r["available"]) for r in rows] == [("orphans", 2)]
    assert 0 <= rows[0]["oldest_due_age_s"] < 60
    conn.execute(worker, ("w-all", ["*"]))
    assert conn.execute(queries.UNSERVED_QUEUES).fetchall() == []
