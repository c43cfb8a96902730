"""The dead letters page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pgsched.dashboard.html import (
    Column,
    Safe,
    ago,
    exception_line,
    fmt,
    join,
    number,
    table,
    url,
)
from pgsched.dashboard.pages.common import View, job_actions, job_link, page_links, queue_link


def dead_letters(view: View, data: Mapping[str, Any]) -> Safe:
    current: str | None = data["queue"]
    counts: Sequence[Mapping[str, Any]] = data["counts"]
    total = sum(int(c["n"]) for c in counts)
    tabs = join(
        [
            fmt('<a class="{on}" href="/dead">all ({n})</a>', on="" if current else "on", n=number(total)),
            *(
                fmt(
                    '<a class="{on}" href="{h}">{q} ({n})</a>',
                    on="on" if c["queue"] == current else "",
                    h=url("dead", queue=c["queue"]),
                    q=c["queue"],
                    n=number(c["n"]),
                )
                for c in counts
            ),
        ]
    )
    rows = (
        [
            job_link(d["id"]),
            queue_link(d["queue"]),
            d["task"],
            d["args"],
            f"{d['attempt']}/{d['max_attempts']}",
            ago(d["died_at"]),
            d["last_worker"],
            exception_line(d["error"]),
            job_actions(view, d["id"], "dead"),
        ]
        for d in data["dead_letters"]
    )
    columns = (
        Column("id", "num"),
        Column("queue"),
        Column("task"),
        Column("args", "code"),
        Column("attempts", "num"),
        Column("died"),
        Column("last worker"),
        Column("error", "wrap"),
        Column(""),
    )
    return fmt(
        '<h1>Dead letters</h1><p class="muted">Jobs that used up their attempts (or were given up on). '
        "Retry redrives one: it runs again now, with a fresh attempt budget.</p>"
        '<div class="tabs">{tabs}</div>{table}{pager}',
        tabs=tabs,
        table=table(columns, rows, empty="No dead letters."),
        pager=page_links(view, data["next_before"]),
    )
