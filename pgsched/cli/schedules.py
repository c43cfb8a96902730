"""`pgsched schedules`: recurring schedules (add, list, remove, pause, resume, preview)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from pgsched.cli.common import emit_json, emit_table, handle_errors, state
from pgsched.core.limits import MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN, MISFIRE_CAP_MAX
from pgsched.core.policies import ConcurrencyPolicy, GapPolicy, MisfirePolicy, OverlapPolicy, values
from pgsched.db import queries


@click.group()
def schedules() -> None:
    """Recurring schedules: a cron expression in an IANA time zone, fired by scanners."""


@schedules.command("add")
@click.argument("name")
@click.argument("cron")
@click.argument("task")
@click.argument("args_json", default="{}")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone, e.g. Europe/Berlin.")
@click.option("--queue", default="default", show_default=True)
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--max-attempts", type=click.IntRange(MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX), default=None)
@click.option(
    "--gap",
    type=click.Choice(values(GapPolicy)),
    default=GapPolicy.RUN.value,
    show_default=True,
    help="A local time that does not exist (DST spring forward): run at the gap's end, or skip.",
)
@click.option(
    "--overlap",
    type=click.Choice(values(OverlapPolicy)),
    default=OverlapPolicy.ONCE.value,
    show_default=True,
    help="A fixed local time that happens twice (DST fall back): run once or twice.",
)
@click.option(
    "--misfire",
    type=click.Choice(values(MisfirePolicy)),
    default=MisfirePolicy.LATEST.value,
    show_default=True,
    help="Occurrences missed while nothing ran.",
)
@click.option("--misfire-cap", type=click.IntRange(1, MISFIRE_CAP_MAX), default=100, show_default=True)
@click.option(
    "--concurrency",
    type=click.Choice(values(ConcurrencyPolicy)),
    default=ConcurrencyPolicy.SKIP.value,
    show_default=True,
    help="When the previous run is still going.",
)
@click.option("--label", "labels", multiple=True, help="A label its jobs require of a worker (repeatable).")
@click.option("--tenant", default=None, help="The tenant its jobs belong to.")
@click.option("--paused", is_flag=True, help="Create it paused.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def add(
    ctx: click.Context,
    name: str,
    cron: str,
    task: str,
    args_json: str,
    tz: str,
    queue: str,
    priority: int,
    max_attempts: int | None,
    gap: str,
    overlap: str,
    misfire: str,
    misfire_cap: int,
    concurrency: str,
    labels: tuple[str, ...],
    tenant: str | None,
    paused: bool,
    as_json: bool,
) -> None:
    """Add (or replace) schedule NAME firing TASK with ARGS_JSON at CRON (in --tz)."""
    from pgsched.core import cron as cronlib

    try:
        cronlib.validate(cron, tz)
    except cronlib.CronError as exc:
        raise click.BadParameter(str(exc), param_hint="CRON / --tz") from exc
    try:
        args = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="ARGS_JSON") from exc
    if not isinstance(args, dict):
        raise click.BadParameter("must be a JSON object", param_hint="ARGS_JSON")
    with state(ctx).connect() as conn:
        row = conn.execute(
            queries.UPSERT_SCHEDULE_CLI,
            (
                name,
                cron,
                task,
                json.dumps(args),
                tz,
                queue,
                priority,
                max_attempts,
                gap,
                overlap,
                misfire,
                misfire_cap,
                concurrency,
                not paused,
                list(labels),
                tenant,
            ),
        ).fetchone()
    version = row["version"] if row else None
    if as_json:
        emit_json({"name": name, "version": version})
    else:
        click.echo(f"schedule {name} saved (version {version}); scanners pick it up at their next pass")


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def list_(ctx: click.Context, as_json: bool) -> None:
    """List schedules with their next occurrence and last outcome."""
    with state(ctx).connect() as conn:
        rows = conn.execute(queries.SCHEDULE_STATUS).fetchall()
    if as_json:
        emit_json(rows)
        return
    emit_table(
        rows,
        [
            "name",
            "cron",
            "timezone",
            "task",
            "queue",
            "enabled",
            "concurrency",
            "next_fire_at",
            "in_flight",
            "last_state",
            "last_error",
        ],
        title="schedules",
    )


@schedules.command("remove")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
@handle_errors
def remove(ctx: click.Context, name: str, as_json: bool) -> None:
    """Remove schedule NAME and withdraw its occurrences that have not started."""
    with state(ctx).connect() as conn:
        row = conn.execute("SELECT pgsched.remove_schedule(%s) AS withdrawn", (name,)).fetchone()
    if row is None or row["withdrawn"] is None:
        click.echo(f"error: no schedule named {name!r}", err=True)
        sys.exit(1)
    if as_json:
        emit_json({"name": name, "removed": True, "withdrawn": row["withdrawn"]})
    else:
        click.echo(f"schedule {name} removed; {row['withdrawn']} waiting occurrences withdrawn")


_TOGGLES = {
    "paused": "SELECT pgsched.pause_schedule(%s) AS ok",
    "resumed": "SELECT pgsched.resume_schedule(%s) AS ok",
}


def _toggle(ctx: click.Context, name: str, done: str, as_json: bool) -> None:
    with state(ctx).connect() as conn:
        row = conn.execute(_TOGGLES[done], (name,)).fetchone()
    if not row or not row["ok"]:
        click.echo(f"error: no schedule named {name!r}", err=True)
        sys.exit(1)
    if as_json:
        emit_json({"name": name, "paused": done == "paused"})
    else:
        click.echo(f"schedule {name} {done}")


@schedules.command("pause")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
@handle_errors
def pause(ctx: click.Context, name: str, as_json: bool) -> None:
    """Stop NAME from firing; occurrences not yet due are withdrawn at the next scan."""
    _toggle(ctx, name, "paused", as_json)


@schedules.command("resume")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
@handle_errors
def resume(ctx: click.Context, name: str, as_json: bool) -> None:
    """Let NAME fire again from now on (occurrences during the pause do not run)."""
    _toggle(ctx, name, "resumed", as_json)


@schedules.command("preview")
@click.argument("name_or_cron")
@click.option("--tz", default=None, help="Time zone when previewing a bare cron expression [default: UTC].")
@click.option("--count", "-n", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--from", "start", default=None, help="Start instant (ISO 8601) [default: now].")
@click.option("--gap", type=click.Choice(values(GapPolicy)), default=None)
@click.option("--overlap", type=click.Choice(values(OverlapPolicy)), default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def preview(
    ctx: click.Context,
    name_or_cron: str,
    tz: str | None,
    count: int,
    start: str | None,
    gap: str | None,
    overlap: str | None,
    as_json: bool,
) -> None:
    """Show the next fire times of a schedule (by name) or of a cron expression, local and UTC.

    Occurrences affected by a DST change are marked, including those the
    gap/overlap policies skip.
    """
    from pgsched.core import cron as cronlib

    spec = _lookup(ctx, name_or_cron)
    expr = spec["cron"] if spec else name_or_cron
    zone = tz or (spec["timezone"] if spec else "UTC")
    gap_policy = GapPolicy(gap or (spec["gap_policy"] if spec else GapPolicy.RUN))
    overlap_policy = OverlapPolicy(overlap or (spec["overlap_policy"] if spec else OverlapPolicy.ONCE))
    begin = datetime.fromisoformat(start) if start else datetime.now(UTC)
    if begin.tzinfo is None:
        begin = begin.replace(tzinfo=UTC)
    try:
        rows = _preview_rows(cronlib, expr, zone, begin, count, gap_policy, overlap_policy)
    except cronlib.CronError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME_OR_CRON / --tz") from exc
    if as_json:
        emit_json({"cron": expr, "timezone": zone, "occurrences": rows})
        return
    emit_table(rows, ["local", "utc", "decision", "dst", "nominal"], title=f"{expr}  ({zone})")


def _lookup(ctx: click.Context, name: str) -> dict[str, Any] | None:
    if " " in name.strip() or name.startswith("@"):
        return None
    with state(ctx).connect() as conn:
        return conn.execute(queries.SCHEDULE, (name,)).fetchone()


def _preview_rows(
    cronlib: Any, expr: str, zone: str, begin: datetime, count: int, gap: Any, overlap: Any
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    last_offset: timedelta | None = None
    # As far ahead as validation looks, computed page by page: a rare schedule ('0 0 * 2 1#5',
    # next in 2044) shows its first fire, and a frequent one costs what its first rows cost.
    found = cronlib.iter_explain(expr, zone, begin, begin + cronlib.LOOKAHEAD, gap=gap, overlap=overlap)
    for occ, decision in found:
        if decision == "skipped_duplicate":
            continue
        offset = occ.local.utcoffset()
        dst = occ.dst or ""
        if not dst and last_offset is not None and offset != last_offset:
            dst = f"offset {_fmt_offset(last_offset)} -> {_fmt_offset(offset)}"
        last_offset = offset
        rows.append(
            {
                "local": occ.local.isoformat(),
                "utc": occ.fire_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                "decision": decision,
                "dst": dst,
                "nominal": occ.nominal,
            }
        )
        if len(rows) >= count:
            break
    return rows


def _fmt_offset(offset: timedelta | None) -> str:
    if offset is None:
        return "?"
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def register(group: click.Group) -> None:
    group.add_command(schedules)
