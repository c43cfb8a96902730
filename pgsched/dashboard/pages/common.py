"""What every page shares: the request's view, links, action buttons, charts and the pager."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from pgsched.dashboard.charts import WINDOWS, queue_charts
from pgsched.dashboard.html import (
    CLIP_AT,
    Safe,
    button_form,
    duration,
    esc,
    fmt,
    join,
    url,
)
from pgsched.dashboard.queries import ACTIVE_STATES

# Ages past these are shown as a warning (amber) or a problem (red).


AGE_WARN_S = 60.0


AGE_BAD_S = 600.0


@dataclass(frozen=True, slots=True)
class View:
    """What every page needs to know about the request: where it is and whether actions are allowed."""

    path: str
    query: Mapping[str, str]
    read_only: bool

    @property
    def here(self) -> str:
        """This page's address (without a flash message), for forms to come back to."""
        return self.with_query()

    def with_query(self, **changes: object) -> str:
        """This page's address with some query parameters changed (None removes one)."""
        merged: dict[str, object] = {k: v for k, v in self.query.items() if k != "msg"}
        merged.update(changes)
        params = {k: str(v) for k, v in merged.items() if v is not None and v != ""}
        return self.path + ("?" + urlencode(params) if params else "")


def age_cell(seconds: float | None) -> Safe:
    if not seconds:
        return Safe("")
    cls = "bad" if seconds >= AGE_BAD_S else "warn" if seconds >= AGE_WARN_S else ""
    return fmt('<span class="{cls}">{text}</span>', cls=cls, text=duration(seconds))


def stat_box(label: str, value: object) -> Safe:
    return fmt('<div class="stat"><b>{value}</b><span>{label}</span></div>', value=value, label=label)


def refresh_links(view: View, refresh: int | None) -> Safe:
    links = [
        fmt(
            '<a class="{on}" href="{href}">{label}</a>',
            on="on" if refresh == seconds else "",
            href=view.with_query(refresh=seconds),
            label=label,
        )
        for seconds, label in ((None, "off"), (5, "5s"), (30, "30s"))
    ]
    return fmt(
        '<div class="toolbar">read at {now} UTC · auto-refresh: {links}</div>',
        now=datetime.now(UTC).strftime("%H:%M:%S"),
        links=join(links, " · "),
    )


def queue_actions(view: View, queue: str, paused: bool) -> Safe:
    if view.read_only:
        return Safe("")
    if paused:
        return button_form(url("queues", queue, "resume"), "resume", next_url=view.here)
    return button_form(url("queues", queue, "pause"), "pause", next_url=view.here, danger=True)


def job_actions(view: View, job_id: int, state: str) -> Safe:
    if view.read_only:
        return Safe("")
    if state in ACTIVE_STATES:
        return button_form(url("jobs", job_id, "cancel"), "cancel", next_url=view.here, danger=True)
    if state in ("dead", "cancelled"):
        return button_form(url("jobs", job_id, "retry"), "retry", next_url=view.here)
    return Safe("")


def job_link(job_id: int) -> Safe:
    return fmt('<a href="{href}">{id}</a>', href=url("jobs", job_id), id=job_id)


def queue_link(queue: str) -> Safe:
    if len(queue) > CLIP_AT:  # cut in tables, like other long text, with the whole name as its tooltip
        return fmt('<a class="clip" href="{href}" title="{q}">{q}</a>', href=url("queues", queue), q=queue)
    return fmt('<a href="{href}">{q}</a>', href=url("queues", queue), q=queue)


def live_every(view: View) -> int:
    """Seconds between live chart updates: ?live=N (1 to 3600), else 10."""
    text = view.query.get("live", "")
    return int(text) if text.isdigit() and 1 <= int(text) <= 3600 else 10


def charts_block(view: View, history: Mapping[str, Any], queue_name: str | None) -> Safe:
    window: str = history["window"]
    tabs = join(
        fmt(
            '<a class="{on}" href="{href}">{label}</a>',
            on="on" if key == window else "",
            href=view.with_query(window=None if key == "1h" else key),
            label=spec.label,
        )
        for key, spec in WINDOWS.items()
    )
    return fmt(
        '<h2>Over time</h2><div class="tabs">{tabs}</div>'
        '<div id="live" data-src="{src}" data-every="{every}">{charts}</div>',
        tabs=tabs,
        src=url("fragments", "charts", queue=queue_name, window=window),
        every=live_every(view),
        charts=queue_charts(history),
    )


def progress_text(fraction: float | None, note: str | None, elapsed_s: float | None = None) -> str:
    """A job's last progress report, and for a running one how long it has run: '42% page 3 · 1m 05s'."""
    parts = []
    if fraction is not None:
        parts.append(f"{fraction * 100:.0f}%" + (f" {note}" if note else ""))
    if elapsed_s is not None:
        parts.append(f"{duration(elapsed_s)} elapsed")
    return " · ".join(parts)


def page_links(view: View, next_before: int | None) -> Safe:
    """Links to the newest page and the next older one, when there is more than one page."""
    links = []
    if view.query.get("before"):
        links.append(fmt('<a href="{h}">← newest</a>', h=view.with_query(before=None)))
    if next_before is not None:
        links.append(fmt('<a href="{h}">older →</a>', h=view.with_query(before=next_before)))
    return fmt('<div class="toolbar pager">{links}</div>', links=join(links, " · ")) if links else Safe("")


def message(title: str, text: str) -> Safe:
    """A page that only says something (not found, refused, unavailable)."""
    return fmt('<h1>{title}</h1><p>{text}</p><p><a href="/">Back to the overview</a></p>', title=title, text=esc(text))
