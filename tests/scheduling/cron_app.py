"""An application with a seconds schedule, for the lone-worker tests."""

from __future__ import annotations

from datetime import timedelta

from pgsched import App
from pgsched.core.job import JobContext

app = App()


@app.cron("* * * * * *", name="every-second", queue="ticks", horizon=timedelta(minutes=1), concurrency="allow")
@app.task(name="ticks.tick", queue="ticks")
def tick(ctx: JobContext) -> str:
    return ctx.scheduled_at.isoformat()
