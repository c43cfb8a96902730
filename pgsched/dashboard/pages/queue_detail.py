"""A queue's page: its counts, charts and jobs, with its actions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pgsched.dashboard.html import (
    Column,
    Safe,
    ago,
    badge,
    duration,
    exception_line,
    fmt,
    join,
    number,
    table,
    timestamp,
    url,
)
from pgsched.dashboard.pages.common import (
    View,
    age_cell,
    charts_block,
    job_actions,
    job_link,
    page_links,
    progress_text,
    queue_actions,
    refresh_links,
    stat_box,
)
from pgsched.dashboard.queries import STATES

JOB_COLUMNS = (
    Column("id", "num"),
    Column("state"),
    Column("task"),
    Column("args", "code"),
    Column("attempt", "num"),
    Column("priority", "num"),
    Column("due"),
    Column("finished"),
    Column("worker"),
    Column("progress"),
    Column("error", "wrap"),
    Column(""),
)


def queue(view: View, data: Mapping[str, Any], refresh: int | None) -> Safe:
    name: str = data["queue"]
    stats: Mapping[str, Any] = data["stats"] or {}
    state: str | None = data["state"]
    paused = bool(stats.get("paused"))
    grid = join(
        [
            stat_box("scheduled", number(stats.get("scheduled", 0))),
            stat_box("available", number(stats.get("available", 0))),
            stat_box("running", number(stats.get("running", 0))),
            stat_box("claimed (waiting for a slot)", number(stats.get("claimed", 0))),
            stat_box("retrying", number(stats.get("retrying", 0))),
            stat_box("lease expired", number(stats.get("lease_expired", 0))),
            stat_box("oldest due", age_cell(stats.get("oldest_due_age_s")) or "—"),
            stat_box("lag p50", duration(stats.get("lag_p50_s")) or "—"),
            stat_box("lag p95", duration(stats.get("lag_p95_s")) or "—"),
            stat_box("lag p99", duration(stats.get("lag_p99_s")) or "—"),
            stat_box("done (5m)", number(stats.get("completed_5m", 0))),
            stat_box("dead (5m)", number(stats.get("dead_5m", 0))),
            stat_box("dead letters", number(stats.get("dead_letters", 0))),
        ]
    )
    tabs = join(
        fmt(
            '<a class="{on}" href="{href}">{label}</a>',
            on="on" if s == state else "",
            href=url("queues", name, state=s),
            label=s or "all",
        )
        for s in (None, *STATES)
    )
    rows = (
        [
            job_link(j["id"]),
            badge(j["state"]),
            j["task"],
            j["args"],
            f"{j['attempt']}/{j['max_attempts']}" if j["max_attempts"] else j["attempt"],
            j["priority"],
            timestamp(j["run_at"]),
            ago(j["finished_at"]),
            j["worker"],
            progress_text(j["progress"], j["progress_note"], j["elapsed_s"]),
            exception_line(j["error"]),
            job_actions(view, j["id"], j["state"]),
        ]
        for j in data["jobs"]
    )
    return fmt(
        '<h1>Queue {name} {status} {action}</h1>{toolbar}<div class="grid">{grid}</div>{charts}'
        '<h2>Jobs</h2><div class="tabs">{tabs}</div>{jobs}{pager}',
        name=name,
        status=badge("paused") if paused else Safe(""),
        action=queue_actions(view, name, paused),
        toolbar=refresh_links(view, refresh),
        grid=grid,
        charts=charts_block(view, data["history"], name),
        tabs=tabs,
        jobs=table(JOB_COLUMNS, rows, empty="No jobs here."),
        pager=page_links(view, data["next_before"]),
    )
