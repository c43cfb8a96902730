"""Tasks for the tests that run `pgsched worker` in a subprocess (--app tests.integration.cli_app:app)."""

from __future__ import annotations

import time

from pgsched import App, JobContext

app = App()


@app.task(name="cli.nap")
def nap(seconds: float) -> float:
    """Sleeps, deaf to cancellation (like a handler stuck in a blocking call)."""
    time.sleep(seconds)
    return seconds


@app.task(name="cli.long")
def long(seconds: float, ctx: JobContext) -> str:
    """A long job written as the README teaches: it returns as soon as it should stop."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.should_stop:
            return "stopped early"
        ctx.sleep(0.05)
    return "ran to the end"
