"""The schedules page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pgsched.dashboard.html import (
    Column,
    Safe,
    ago,
    badge,
    button_form,
    exception_line,
    fmt,
    join,
    table,
    timestamp,
    url,
)
from pgsched.dashboard.pages.common import View, job_link, queue_link


def schedules(view: View, data: Mapping[str, Any]) -> Safe:
    current: str | None = data["schedule"]
    # The pause/resume button sits by the status, never off the right edge;
    # the long cells (policies, errors) wrap instead of widening the table.
    columns = (
        Column("name", "wrap"),
        Column("status"),
        Column("", "act"),
        Column("cron", "code"),
        Column("time zone"),
        Column("task"),
        Column("queue"),
        Column("next fire"),
        Column("in flight", "num"),
        Column("last run"),
        Column("policies", "wrap"),
        Column("error", "wrap"),
    )
    rows = (
        [
            fmt('<a href="{h}">{n}</a>', h=url("schedules", schedule=s["name"]), n=s["name"]),
            badge("enabled") if s["enabled"] else badge("paused"),
            _schedule_actions(view, s["name"], bool(s["enabled"])),
            s["cron"],
            s["timezone"],
            s["task"],
            queue_link(s["queue"]),
            timestamp(s["next_fire_at"]),
            s["in_flight"],
            join([badge(s["last_state"]), " ", ago(s["last_finished_at"])]) if s["last_state"] else "",
            f"misfire {s['misfire_policy']}, gap {s['gap_policy']}, overlap {s['overlap_policy']}, "
            f"concurrency {s['concurrency']}",
            fmt('<span class="bad">{e}</span>', e=exception_line(s["last_error"])) if s["last_error"] else "",
        ]
        for s in data["schedules"]
    )
    occurrences = table(
        (
            Column("schedule"),
            Column("fire at"),
            Column("local time"),
            Column("dst"),
            Column("decision"),
            Column("reason", "wrap"),
            Column("job", "num"),
            Column("decided"),
        ),
        (
            [
                o["schedule"],
                timestamp(o["fire_at"]),
                o["nominal"],
                o["dst"],
                badge(o["decision"]),
                o["reason"],
                job_link(o["job_id"]) if o["job_id"] is not None else "",
                ago(o["decided_at"]),
            ]
            for o in data["occurrences"]
        ),
        empty="No occurrences decided yet (scanners expand schedules into jobs).",
    )
    heading = fmt(' of {s} · <a href="/schedules">all</a>', s=current) if current else Safe("")
    return fmt(
        "<h1>Schedules</h1>{table}<h2>Recent decisions{heading}</h2>{occurrences}",
        table=table(columns, rows, empty="No schedules."),
        heading=heading,
        occurrences=occurrences,
    )


def _schedule_actions(view: View, name: str, enabled: bool) -> Safe:
    if view.read_only:
        return Safe("")
    if enabled:
        return button_form(url("schedules", name, "pause"), "pause", next_url=view.here, danger=True)
    return button_form(url("schedules", name, "resume"), "resume", next_url=view.here)
