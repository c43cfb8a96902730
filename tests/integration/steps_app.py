"""A job of three durable steps for the tests that SIGKILL `pgsched worker` (--app tests.integration.steps_app:app).

Each step appends "pid attempt" to a file of its own in ``folder`` when it runs (its side effect); step 3 of
the first attempt then waits for ``folder/release`` (which the test never writes), so the test can kill the
worker in the middle of it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pgsched import App, JobContext

app = App()


def _effect(folder: str, name: str, attempt: int) -> str:
    with open(Path(folder) / name, "a") as out:
        out.write(f"{os.getpid()} {attempt}\n")
    return f"{name} done"


@app.task(name="steps.three", max_attempts=3)
def three(folder: str, ctx: JobContext) -> list[str]:
    first = ctx.step("one", _effect, folder, "one", ctx.attempt)
    second = ctx.step("two", _effect, folder, "two", ctx.attempt)

    def slow_third() -> str:
        done = _effect(folder, "three", ctx.attempt)
        while ctx.attempt == 1 and not (Path(folder) / "release").exists():
            time.sleep(0.05)  # killed here on the first attempt
        return done

    third = ctx.step("three", slow_third)
    return [first, second, third]
