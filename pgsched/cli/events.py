"""`pgsched events`: the status events of finished jobs, read gap-free from the history, live with --follow."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click

from pgsched.api.events import EventFollower, EventHooks, current_position, read_events
from pgsched.cli.common import handle_errors, printable, state
from pgsched.core.event import STATES, Event
from pgsched.db import queries


def _line(event: Event) -> str:
    when = event.finished_at.astimezone().strftime("%Y-%m-%d %H:%M:%S") if event.finished_at else ""
    text = f"{event.position}  {when}  {event.state:<9}  job {event.id}  {event.task}  queue={event.queue}"
    text += f"  attempt={event.attempt}"
    if event.error and event.state == "dead":
        lines = event.error.strip().splitlines()
        text += f"  error={lines[-1] if lines else ''}"
    return printable(text)


def _write_position(path: Path, position: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{position}\n")
    os.replace(tmp, path)  # a crash leaves the old position or the new one, never half of one


def _check_writable(path: Path) -> None:
    """Refuse a position file that cannot be written before any event is printed (or a hook run)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("a"):
            pass
        tmp.unlink()
    except OSError as exc:
        raise click.BadParameter(
            f"cannot write {tmp} ({exc.strerror}): the position file needs a writable directory",
            param_hint="--position-file",
        ) from None


def _read_position(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return int(text)
    except ValueError:
        raise click.UsageError(f"{path} does not hold a position: {text[:40]!r}") from None


@click.command()
@click.option("--follow", "-f", is_flag=True, help="Keep printing events as jobs finish (Ctrl-C stops).")
@click.option(
    "--since",
    type=click.IntRange(0, None),
    default=None,
    help="Start after this position (each event carries one; 0: the oldest history kept). "
    "Default: with --follow, now; without, the last --limit events.",
)
@click.option(
    "--position-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Resume from the position in this file (when --since is not given) and write each event's position "
    "back after printing it and running the hooks.",
)
@click.option("--state", "states", multiple=True, type=click.Choice(STATES), help="Only these states (repeatable).")
@click.option("--queue", "queues", multiple=True, help="Only these queues (repeatable).")
@click.option("--limit", type=click.IntRange(1, 100000), default=100, show_default=True, help="Without --follow.")
@click.option(
    "--app",
    "app_ref",
    default=None,
    envvar="PGSCHED_APP",
    help="MODULE:ATTRIBUTE of a pgsched.App: run its @app.on_event hooks for every event followed.",
)
@click.option("--poll-interval", type=click.FloatRange(0.05, None), default=1.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
@handle_errors
def events(
    ctx: click.Context,
    follow: bool,
    since: int | None,
    position_file: Path | None,
    states: tuple[str, ...],
    queues: tuple[str, ...],
    limit: int,
    app_ref: str | None,
    poll_interval: float,
    as_json: bool,
) -> None:
    """Status events of finished jobs (completed, dead, cancelled), in stream order.

    Read from the job history, gap-free: NOTIFY on pgsched_events only
    wakes the reader. Each event carries its position; --since POSITION (or
    --position-file) resumes exactly after it.
    """
    hooks = EventHooks()
    if app_ref is not None:
        from pgsched.api.loader import load_app

        hooks = load_app(app_ref).event_hooks
    if position_file is not None:
        _check_writable(position_file)
    if since is None and position_file is not None:
        since = _read_position(position_file)

    def show(event: Event) -> None:
        if (states and event.state not in states) or (queues and event.queue not in queues):
            return
        if as_json:
            click.echo(json.dumps(event.as_dict()))
        else:
            click.echo(_line(event))
        hooks.run(event)

    cli = state(ctx)
    if not follow:
        with cli.connect() as conn:
            if since is None:
                # The last `limit` events: read forward from a window behind the horizon.
                since = max(0, _start_of_last(conn, limit))
            found = read_events(conn, since, limit)
        for event in found:
            show(event)
        if position_file is not None and found and found[-1].position is not None:
            _write_position(position_file, found[-1].position)
        return

    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    follower = EventFollower(cli.resolve(), since=since, poll_interval=poll_interval, stop=stop)
    saved = since
    for event in follower:
        show(event)
        # The follower's position moves past a transaction only with its last event (they share one).
        if position_file is not None and follower.position is not None and follower.position != saved:
            saved = follower.position
            _write_position(position_file, saved)
    hooks.close()


def _start_of_last(conn: Any, limit: int) -> int:
    """A position from which reading gives at least the last `limit` events (0 when there are fewer)."""
    horizon = current_position(conn)
    # A window of positions behind the horizon, widened until it holds `limit` events or starts at 0.
    step = max(limit, 1000) * 4
    while True:
        after = max(horizon - step, 0)
        row = conn.execute(queries.LAST_POSITIONS, {"after": after, "n": limit}).fetchone()
        if row is None or int(row["n"]) >= limit or after == 0:
            break
        step *= 4
    start = int(row["pos"]) - 1 if row and row["pos"] else 0
    return min(start, horizon)


def register(group: click.Group) -> None:
    group.add_command(events)
