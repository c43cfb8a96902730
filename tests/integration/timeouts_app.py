"""Tasks for the timeout tests that need an importable app (the process pool's children, `pgsched worker`)."""

from __future__ import annotations

import os
import time

from pgsched import App

app = App()


@app.task(name="to.pid", retry_backoff=0.1, retry_backoff_max=0.1)
def pid() -> int:
    """The process that ran the handler."""
    return os.getpid()


@app.task(name="to.hang", timeout=1.0, retry_backoff=0.1, retry_backoff_max=0.1)
def hang(seconds: float, mark: str | None = None) -> str:
    """A handler stuck in a blocking call, deaf to every signal the worker gives (so only a timeout ends it)."""
    if mark:
        with open(mark, "a") as out:
            out.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return "late"
