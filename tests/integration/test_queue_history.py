"""Scanners and housekeeping workers keep pgsched.queue_history rolled up while they run."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgsched import App
from pgsched.runtime.scanner import Scanner, ScannerOptions
from tests.integration.conftest import wait_all, wait_for


def completed_in_history(dsn: str, queue: str) -> int:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(completed), 0) AS n FROM pgsched.queue_history WHERE queue = %s", [queue]
        ).fetchone()
    return int(row["n"]) if row else 0


def test_a_worker_without_a_scanner_rolls_up_what_it_ran(app: App, start_worker: Any) -> None:
    @app.task(queue="hist")
    def noop(n: int) -> None:
        del n

    with psycopg.connect(app.dsn, autocommit=True, row_factory=dict_row) as conn:
        ids = [noop.enqueue(i, conn=conn) for i in range(5)]
        running = start_worker(queues=["hist"])
        wait_all(conn, ids, "completed", timeout=20)

        def rolled() -> bool:
            running.worker._next_rollup = 0.0  # housekeeping rolls up every minute; the test does not wait that long
            return completed_in_history(app.dsn, "hist") == 5

        wait_for(rolled, timeout=30, interval=0.5, what="5 completed in queue_history")


def test_a_scanner_rolls_up_finished_work(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        job_id = conn.execute("SELECT pgsched.enqueue('t', queue => 'scanned') AS id").fetchone()["id"]  # type: ignore[index]
        leased = conn.execute("SELECT * FROM pgsched.claim('w', ARRAY['scanned'], 1, '30 s')").fetchone()
        assert leased is not None
        assert leased["id"] == job_id
        conn.execute("SELECT pgsched.complete(ARRAY[%s::bigint], ARRAY[%s::bigint])", [job_id, leased["lease_token"]])
    scanner = Scanner(dsn, ScannerOptions(install_signal_handlers=False, vacuum_interval=0, rollup_interval=0.2))
    thread = threading.Thread(target=scanner.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: completed_in_history(dsn, "scanned") == 1, timeout=20, what="the scanner's rollup")
    finally:
        scanner.stop()
        thread.join(10)
    assert not thread.is_alive()
