"""The demo, one feature: a real workload run through worker processes (``workload``), and the story that acts
out the scheduler's promises on a pretend clock (``story``). ``pgsched demo [--story]`` plays them.

The workload's names are re-exported here, so ``pgsched worker --app pgsched.demo:app`` loads its tasks.
"""

from __future__ import annotations

from pgsched.demo.workload import (
    APP_REFERENCE,
    QUEUE_FAST,
    QUEUE_IO,
    QUEUE_RETRY,
    QUEUES,
    DemoFailed,
    DemoOptions,
    Plan,
    Reporter,
    Snapshot,
    Summary,
    TransientError,
    WorkerProcess,
    WorkerReport,
    always_fails,
    app,
    fetch,
    flaky,
    make_plan,
    new_run_id,
    quick,
    report,
    run_demo,
    simulated_io,
    start_workers,
    stop_workers,
    wait_ready,
    worker_command,
)

__all__ = [
    "APP_REFERENCE",
    "QUEUES",
    "QUEUE_FAST",
    "QUEUE_IO",
    "QUEUE_RETRY",
    "DemoFailed",
    "DemoOptions",
    "Plan",
    "Reporter",
    "Snapshot",
    "Summary",
    "TransientError",
    "WorkerProcess",
    "WorkerReport",
    "always_fails",
    "app",
    "fetch",
    "flaky",
    "make_plan",
    "new_run_id",
    "quick",
    "report",
    "run_demo",
    "simulated_io",
    "start_workers",
    "stop_workers",
    "wait_ready",
    "worker_command",
]
