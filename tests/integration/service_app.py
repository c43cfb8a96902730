"""A service for the tests that run `pgsched worker` in a subprocess (--app tests.integration.service_app:app)."""

from __future__ import annotations

import os

from pgsched import App, JobContext

app = App()


@app.service(name="svc.beat")
def beat(path: str, ctx: JobContext) -> None:
    """Writes "pid attempt" when it starts, then runs until it should stop."""
    with open(path, "a") as out:
        out.write(f"{os.getpid()} {ctx.attempt}\n")
    while not ctx.should_stop:
        ctx.sleep(0.2)
