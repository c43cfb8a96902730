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
