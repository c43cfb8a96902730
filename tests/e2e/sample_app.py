"""A small application for the worker tests: tasks that succeed, fail, and are async."""

from __future__ import annotations

import asyncio

from pgsched import App
from pgsched.core.job import JobContext
from pgsched.errors import GiveUp

app = App()


@app.task(name="sample.add", queue="sample")
def add(a: int, b: int) -> int:
    return a + b


@app.task(name="sample.greet", queue="sample")
async def greet(name: str) -> str:
    await asyncio.sleep(0)
    return f"hello {name}"


@app.task(name="sample.whoami", queue="sample")
def whoami(ctx: JobContext) -> dict[str, int]:
    return {"job_id": ctx.id, "attempt": ctx.attempt}


@app.task(name="sample.broken", queue="sample", max_attempts=1)
def broken(reason: str) -> None:
    raise GiveUp(reason)
