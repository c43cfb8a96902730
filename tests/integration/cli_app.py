"""Tasks for the tests that run `pgsched worker` in a subprocess (--app tests.integration.cli_app:app)."""

from __future__ import annotations

import time

from pgsched import App

app = App()


@app.task(name="cli.nap")
def nap(seconds: float) -> float:
    """Sleeps, deaf to cancellation (like a handler stuck in a blocking call)."""
    time.sleep(seconds)
    return seconds
