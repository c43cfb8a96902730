"""Charts over time, drawn on the server as inline SVG from pgsched.queue_history (no script, no library).

``buckets`` lays the rollup rows on a regular time axis (missing buckets are
0 for counts and unknown for samples); ``line_chart`` draws series over it.
Every value inserted goes through ``fmt``, so the SVG is escaped like the rest
of the page, and it uses presentation attributes only (the stylesheet policy
allows no inline style).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pgsched.dashboard.html import Safe, duration, fmt, join

ORIGIN: Final = datetime(2000, 1, 1, tzinfo=UTC)  # the date_bin origin of queries.HISTORY


@dataclass(frozen=True, slots=True)
class Window:
    """A chart's time span and the width of one point."""

    label: str
    span: timedelta
    bucket: timedelta


WINDOWS: Final = {
    "1h": Window("last hour", timedelta(hours=1), timedelta(minutes=1)),
    "1d": Window("last day", timedelta(days=1), timedelta(minutes=15)),
}


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    color: str
    values: Sequence[float | None]


def bucket_start(at: datetime, bucket: timedelta) -> datetime:
    return at - (at - ORIGIN) % bucket


def buckets(rows: Sequence[Mapping[str, Any]], now: datetime, window: Window) -> list[dict[str, Any]]:
    """One dict per bucket from now - span to now, oldest first; buckets without a row have only 'at'."""
    by_time = {row["at"].astimezone(UTC): row for row in rows}
    last = bucket_start(now.astimezone(UTC), window.bucket)
    count = int(window.span / window.bucket)
    slots = [last - window.bucket * i for i in range(count - 1, -1, -1)]
    return [{**by_time.get(at, {}), "at": at} for at in slots]


def counts(points: Sequence[Mapping[str, Any]], *keys: str, per_minute: float) -> list[float | None]:
    """The sum of keys per bucket, per minute (a bucket with no row counts 0)."""
    return [sum(float(p.get(k) or 0) for k in keys) / per_minute for p in points]


def samples(points: Sequence[Mapping[str, Any]], key: str) -> list[float | None]:
    """A sampled value per bucket; None where nothing was sampled."""
    return [None if p.get(key) is None else float(p[key]) for p in points]


# -- drawing -----------------------------------------------------------------

WIDTH: Final = 380
HEIGHT: Final = 150
LEFT: Final = 40
RIGHT: Final = 8
TOP: Final = 8
BOTTOM: Final = 22


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times 10^n at or above value (at least 1)."""
    if value <= 1:
        return 1.0
    scale = 1.0
    while scale * 10 < value:
        scale *= 10
    for step in (1, 2, 2.5, 5, 10):
        if step * scale >= value:
            return step * scale
    return 10 * scale  # pragma: no cover - the loop always returns


def _segments(values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    """Runs of consecutive known values, as (index, value)."""
    runs: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for i, v in enumerate(values):
        if v is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((i, v))
    if current:
        runs.append(current)
    return runs


def number_label(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.2g}" if value < 1 else f"{value:.1f}"


def seconds_label(value: float) -> str:
    return duration(value) if value else "0"


def line_chart(
    name: str,
    title: str,
    times: Sequence[datetime],
    series: Sequence[Series],
    *,
    label: Callable[[float], str] = number_label,
) -> Safe:
    """A <figure> with an SVG line chart of series over times, a legend with each series' latest value."""
    known = [v for s in series for v in s.values if v is not None]
    top = _nice_max(max(known, default=0.0))
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    n = max(len(times), 2)

    def x(i: int) -> float:
        return LEFT + plot_w * i / (n - 1)

    def y(v: float) -> float:
        return TOP + plot_h * (1 - min(v, top) / top)

    grid = join(
        fmt(
            '<line x1="{x1}" x2="{x2}" y1="{y}" y2="{y}" stroke="#d8dee4" stroke-width="1"/>'
            '<text x="{tx}" y="{ty}" text-anchor="end" font-size="10" fill="#656d76">{text}</text>',
            x1=LEFT,
            x2=WIDTH - RIGHT,
            y=f"{y(top * f):.1f}",
            tx=LEFT - 4,
            ty=f"{y(top * f) + 3:.1f}",
            text=label(top * f),
        )
        for f in (0.0, 0.5, 1.0)
    )
    ticks = join(
        fmt(
            '<text x="{x}" y="{y}" text-anchor="{anchor}" font-size="10" fill="#656d76">{text}</text>',
            x=f"{x(i):.1f}",
            y=HEIGHT - 6,
            anchor=anchor,
            text=times[i].astimezone(UTC).strftime("%H:%M" if times[-1] - times[0] < timedelta(days=1) else "%d %H:%M"),
        )
        for i, anchor in ((0, "start"), (len(times) // 2, "middle"), (len(times) - 1, "end"))
        if 0 <= i < len(times)
    )
    lines = []
    for s in series:
        for run in _segments(s.values):
            if len(run) == 1:
                i, v = run[0]
                lines.append(
                    fmt('<circle cx="{x}" cy="{y}" r="2" fill="{c}"/>', x=f"{x(i):.1f}", y=f"{y(v):.1f}", c=s.color)
                )
            else:
                points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in run)
                lines.append(
                    fmt(
                        '<polyline points="{p}" fill="none" stroke="{c}" stroke-width="1.6" stroke-linejoin="round"/>',
                        p=points,
                        c=s.color,
                    )
                )
    legend = join(
        fmt(
            '<span class="key" data-series="{label}"><svg width="10" height="10" aria-hidden="true">'
            '<rect width="10" height="10" fill="{c}"/></svg> {label} <b>{last}</b></span>',
            c=s.color,
            label=s.label,
            last=_latest(s.values, label),
        )
        for s in series
    )
    return fmt(
        '<figure class="chart" data-chart="{name}"><figcaption>{title} <span class="legend">{legend}</span>'
        "</figcaption>"
        '<svg viewBox="0 0 {w} {h}" width="100%" role="img" aria-label="{title}" preserveAspectRatio="none">'
        "<title>{title}</title>{grid}{ticks}{lines}</svg></figure>",
        name=name,
        title=title,
        legend=legend,
        w=WIDTH,
        h=HEIGHT,
        grid=grid,
        ticks=ticks,
        lines=join(lines),
    )


def _latest(values: Sequence[float | None], label: Callable[[float], str]) -> str:
    for v in reversed(values):
        if v is not None:
            return label(v)
    return "—"


def queue_charts(history: Mapping[str, Any]) -> Safe:
    """Throughput, failures, start lag and depth of one queue (or all) over the history's window."""
    window = WINDOWS[history["window"]]
    points = buckets(history["points"], history["now"], window)
    times = [p["at"] for p in points]
    per_minute = window.bucket / timedelta(minutes=1)
    charts = [
        line_chart(
            "throughput",
            "Throughput (jobs/min)",
            times,
            [Series("completed", "#1a7f37", counts(points, "completed", per_minute=per_minute))],
        ),
        line_chart(
            "failures",
            "Failures (per min)",
            times,
            [
                Series("failed, retrying", "#9a6700", counts(points, "failed", per_minute=per_minute)),
                Series("dead", "#cf222e", counts(points, "dead", per_minute=per_minute)),
                Series("lease expired", "#8250df", counts(points, "expired", per_minute=per_minute)),
            ],
        ),
        line_chart(
            "lag",
            "Start lag",
            times,
            [
                Series("p50", "#54aeff", samples(points, "lag_p50_s")),
                Series("p95", "#0969da", samples(points, "lag_p95_s")),
            ],
            label=seconds_label,
        ),
        line_chart(
            "depth",
            "Depth (sampled)",
            times,
            [
                Series("available", "#0969da", samples(points, "available")),
                Series("running", "#bf8700", samples(points, "running")),
            ],
        ),
    ]
    return fmt(
        '<div class="charts" data-window="{window}" data-now="{now}">{charts}</div>',
        window=history["window"],
        now=history["now"].astimezone(UTC).isoformat(),
        charts=join(charts),
    )
