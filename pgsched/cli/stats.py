"""`pgsched stats` and `pgsched queues`: depth, lag and rates per queue, live workers, pause, resume, configure."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click
import psycopg

from pgsched.cli.common import (
    CliState,
    build_table,
    check_read_dsn,
    console,
    emit_json,
    handle_errors,
    parse_duration,
    state,
    to_jsonable,
)
from pgsched.db.replica import describe, replica_state
from pgsched.db.settings import configured_dsn
from pgsched.errors import PgschedError
from pgsched.observe.redact import redact

if TYPE_CHECKING:
    from rich.console import RenderableType

Conn = psycopg.Connection[dict[str, Any]]

# Table headings for queue_stats columns, in display order: depth now, then the last 5 minutes.
NOW_HEADINGS = {
    "queue": "queue",
    "paused": "paused",
    "scheduled": "scheduled",
    "waiting": "waiting",
    "available": "available",
    "running": "running",
    "claimed": "claimed",
    "retrying": "retrying",
    "lease_expired": "lease expired",
    "oldest_due_age_s": "oldest due",
}
RECENT_HEADINGS = {
    "queue": "queue",
    "completed_5m": "completed",
    "dead_5m": "dead",
    "cancelled_5m": "cancelled",
    "completed_per_s": "completed/s",
    "lag_p50_s": "lag p50",
    "lag_p95_s": "lag p95",
    "lag_p99_s": "lag p99",
}
SINCE_HEADINGS = {
    "queue": "queue",
    "completed": "completed",
    "completed_per_min": "per min",
    "failed": "failed (retrying)",
    "dead": "dead",
    "cancelled": "cancelled",
    "retried": "redriven",
    "expired": "leases expired",
    "lag_p95_max_s": "worst lag p95",
    "run_p95_max_s": "worst run p95",
    "available_max": "peak available",
}
WORKER_HEADINGS = ("name", "host", "pid", "queues", "running", "claimed", "seen", "started")
_LAG_COLUMNS = frozenset({"lag_p50_s", "lag_p95_s", "lag_p99_s", "lag_p95_max_s", "run_p95_max_s"})


def format_seconds(value: float | None) -> str:
    """A duration for people: '', '850ms', '4.2s', '3m05s', '2h01m', '3d04h'."""
    if value is None:
        return ""
    if value < 0:
        return "-" + format_seconds(-value)
    if value < 0.9995:
        return f"{round(value * 1000)}ms"
    if value < 59.95:
        return f"{value:.1f}s"
    whole = round(value)
    for size, unit, small, small_unit in ((86400, "d", 3600, "h"), (3600, "h", 60, "m"), (60, "m", 1, "s")):
        if whole >= size:
            return f"{whole // size}{unit}{(whole % size) // small:02d}{small_unit}"
    return f"{whole}s"  # pragma: no cover - whole >= 60 here


def snapshot(conn: Conn, since: timedelta | None = None, *, replica: bool = False) -> dict[str, Any]:
    """Queues (pgsched.queue_stats) and live workers (pgsched.workers_live), read now; with since, also each
    queue's totals over that window from pgsched.queue_history; with replica, also whether the server is a
    standby and how far behind it is (see pgsched.db.replica)."""
    from pgsched.db import queries

    snap = {
        "at": datetime.now().astimezone(),
        "queues": conn.execute(queries.QUEUE_STATS).fetchall(),
        "workers": conn.execute(queries.WORKERS_LIVE).fetchall(),
        "policies": conn.execute(queries.QUEUE_POLICIES).fetchall(),
        "unserved_labels": conn.execute(queries.UNSERVED_LABELS).fetchall(),
        "unserved_tasks": conn.execute(queries.UNSERVED_TASKS).fetchall(),
    }
    if since is not None:
        snap["since_s"] = since.total_seconds()
        snap["history"] = conn.execute(queries.QUEUE_TOTALS, {"since": since}).fetchall()
    if replica:
        snap["replica"] = replica_state(conn)
    return snap


def table_cells(row: dict[str, Any], headings: dict[str, str]) -> dict[str, Any]:
    """A queue_stats row as table cells under the given headings (durations for people)."""
    out: dict[str, Any] = {}
    for column, heading in headings.items():
        value = row.get(column)
        if column == "oldest_due_age_s":
            value = format_seconds(value) if value else ""  # 0: nothing is due
        elif column in _LAG_COLUMNS:
            value = format_seconds(value)
        elif column in ("completed_per_s", "completed_per_min"):
            value = f"{value:.2f}"
        elif column == "paused":
            value = "PAUSED" if value else ""
        out[heading] = value
    return out


def _worker_cells(row: dict[str, Any]) -> dict[str, Any]:
    running = row["running"] if row.get("concurrency") is None else f"{row['running']}/{row['concurrency']}"
    return {
        "name": row["name"],
        "host": row.get("host"),
        "pid": row.get("pid"),
        "queues": ",".join(row.get("queues") or []),
        "running": running,
        "claimed": row.get("claimed", 0),
        "seen": f"{format_seconds(row.get('seen_s_ago'))} ago",
        "started": row.get("started_at"),
    }


def _dispatch_parts(snap: dict[str, Any]) -> list[RenderableType]:
    """The dispatch policies table, and warning tables for jobs no live worker can take: by labels, by task."""
    from pgsched.api.dispatch import describe

    parts: list[RenderableType] = []
    if snap.get("policies"):
        rows = [{"queue": p["queue"], "dispatch policy": describe(p)} for p in snap["policies"]]
        parts.append(build_table(rows, ["queue", "dispatch policy"], title="dispatch policies"))
    if snap.get("unserved_labels"):
        rows = [
            {
                "queue": u["queue"],
                "labels": ",".join(u["labels"]),
                "due jobs": u["available"],
                "oldest due": format_seconds(u["oldest_due_age_s"]),
                "workers of the queue": ",".join(u["queue_workers"]) or "(none)",
            }
            for u in snap["unserved_labels"]
        ]
        headings = ["queue", "labels", "due jobs", "oldest due", "workers of the queue"]
        parts.append(build_table(rows, headings, title="UNSERVED: due jobs whose labels no live worker offers"))
    if snap.get("unserved_tasks"):
        rows = [
            {
                "queue": u["queue"],
                "task": u["task"],
                "jobs": u["jobs"],
                "unserved for": format_seconds(u["unserved_s"]),
                "dead in": format_seconds(u["dead_in_s"]),
            }
            for u in snap["unserved_tasks"]
        ]
        headings = ["queue", "task", "jobs", "unserved for", "dead in"]
        parts.append(build_table(rows, headings, title="UNSERVED: jobs whose task no live worker has registered"))
    return parts


def render(snap: dict[str, Any], footer: str | None = None) -> RenderableType:
    """Both tables (and a footer line) as one rich renderable."""
    from rich.console import Group
    from rich.text import Text

    parts: list[RenderableType] = []
    if "replica" in snap:
        parts.append(Text(describe(snap["replica"]), style="bold"))
    queues = snap["queues"]
    if queues:
        now = [table_cells(r, NOW_HEADINGS) for r in queues]
        recent = [table_cells(r, RECENT_HEADINGS) for r in queues]
        parts.append(build_table(now, list(NOW_HEADINGS.values()), title="queues now"))
        if "history" not in snap:
            parts.append(build_table(recent, list(RECENT_HEADINGS.values()), title="last 5 minutes"))
    else:
        parts.append(Text("no queues yet: nothing enqueued, nothing finished in the last 5 minutes"))
    parts += _dispatch_parts(snap)
    if "history" in snap:
        title = f"last {format_seconds(snap['since_s'])} (pgsched.queue_history, per minute)"
        if snap["history"]:
            rows = [table_cells(r, SINCE_HEADINGS) for r in snap["history"]]
            parts.append(build_table(rows, list(SINCE_HEADINGS.values()), title=title))
        else:
            parts.append(Text(f"{title}: nothing rolled up (scanners and workers roll up every minute)"))
    if snap["workers"]:
        workers = [_worker_cells(r) for r in snap["workers"]]
        parts.append(build_table(workers, WORKER_HEADINGS, title="workers (seen in the last minute)"))
    else:
        parts.append(Text("no live workers"))
    if footer:
        parts.append(Text(footer, style="dim"))
    return Group(*parts)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with --watch: one JSON object per line).")
@click.option("--watch", "-w", is_flag=True, help="Refresh every --interval seconds until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, None),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option(
    "--since",
    metavar="DURATION",
    help="Instead of the last 5 minutes, totals per queue over this window (1h, 30m, 1d) from pgsched.queue_history.",
)
@click.option(
    "--read-dsn",
    default=None,
    metavar="DSN",
    help="Read from this server (a streaming replica) instead of --dsn, and show how far behind it is.",
)
@click.pass_context
@handle_errors
def stats(
    ctx: click.Context, as_json: bool, watch: bool, interval: float, since: str | None, read_dsn: str | None
) -> None:
    """Per queue: jobs by state now, and what finished in the last 5 minutes; then live workers.

    \b
    queues now
      scheduled      waiting for their time
      waiting        waiting for their dependencies to complete
      available      due, waiting for a worker
      running        its handler has started
      claimed        leased by a worker, waiting for a free slot
      retrying       waiting to run again after a failure
      lease expired  running, but the lease ran out (worker gone or stuck)
      oldest due     how long the oldest due job has waited
    last 5 minutes
      completed, dead, cancelled, completed/s
      lag p50/p95/p99   handler start minus due time
    workers: those seen in the last minute

    --since 1h: per queue over the last hour, minute by minute rolled up
      completed, per min, failed (retrying), dead, cancelled, redriven,
      leases expired, worst lag p95, worst run p95, peak available

    --json gives the same numbers, with durations in seconds. With --read-dsn the
    numbers come from that server, as of its last replayed commit (lag_s).
    """
    window = None
    if since is not None:
        try:
            window = parse_duration(since)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--since") from None
        if window <= timedelta(0):
            raise click.BadParameter("must be longer than 0", param_hint="--since")
    if read_dsn:
        primary = state(ctx).dsn or configured_dsn()
        if primary:  # without one (the embedded server's default) there is nothing to compare with
            check_read_dsn(primary, read_dsn)
    cli = CliState(dsn=read_dsn) if read_dsn else state(ctx)
    if watch:
        _watch(cli, interval, as_json, window, replica=read_dsn is not None)
        return
    with cli.connect() as conn:
        snap = snapshot(conn, window, replica=read_dsn is not None)
    if as_json:
        emit_json(snap)
    else:
        console().print(render(snap))


def _snapshots(
    cli: CliState, interval: float, since: timedelta | None, replica: bool = False
) -> Iterator[dict[str, Any] | str]:
    """A snapshot every interval, over one connection; a lost connection yields its error and reconnects."""
    while True:
        try:
            with cli.connect() as conn:
                while True:
                    yield snapshot(conn, since, replica=replica)
                    time.sleep(interval)
        except PgschedError as exc:
            yield redact(f"error: {exc} (retrying every {interval:g}s)")
            time.sleep(interval)


def _watch(cli: CliState, interval: float, as_json: bool, since: timedelta | None, *, replica: bool = False) -> None:
    cli.resolve()  # a missing configuration ends the command; a lost connection is retried
    try:
        if as_json:
            _watch_json(cli, interval, since, replica)
        elif console().is_terminal:
            _watch_live(cli, interval, since, replica)
        else:
            _watch_append(cli, interval, since, replica)
    except KeyboardInterrupt:
        pass


def _watch_json(cli: CliState, interval: float, since: timedelta | None, replica: bool = False) -> None:
    for item in _snapshots(cli, interval, since, replica):
        if isinstance(item, str):
            click.echo(item, err=True)
        else:
            click.echo(json.dumps(to_jsonable(item)))


def _footer(snap: dict[str, Any], interval: float) -> str:
    return f"{snap['at']:%H:%M:%S}, every {interval:g}s; Ctrl-C to stop"


def _watch_append(cli: CliState, interval: float, since: timedelta | None, replica: bool = False) -> None:
    """Not a terminal (a pipe, a log): print each snapshot after the last instead of redrawing."""
    out = console()
    for item in _snapshots(cli, interval, since, replica):
        if isinstance(item, str):
            click.echo(item, err=True)
        else:
            out.print(render(item, _footer(item, interval)))
            out.print()
            out.file.flush()


def _watch_live(cli: CliState, interval: float, since: timedelta | None, replica: bool = False) -> None:
    from rich.live import Live

    last: dict[str, Any] = {"queues": [], "workers": []}
    with Live(console=console(), auto_refresh=False) as live:
        for item in _snapshots(cli, interval, since, replica):
            if isinstance(item, str):
                live.update(render(last, item), refresh=True)
                continue
            last = item
            live.update(render(item, _footer(item, interval)), refresh=True)


def register(group: click.Group) -> None:
    group.add_command(stats)
