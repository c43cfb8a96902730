"""`pgsched enqueue`, `pgsched jobs` and `pgsched dlq`: put work in, look at it, cancel and redrive it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

import click
import psycopg

from pgsched.cli.common import (
    build_table,
    cell,
    console,
    emit_json,
    emit_table,
    fail,
    first_line,
    handle_errors,
    printable,
    state,
)
from pgsched.core.job import ACTIVE_STATES, TERMINAL_STATES
from pgsched.db import queries

Conn = psycopg.Connection[dict[str, Any]]

STATES = (*ACTIVE_STATES, *TERMINAL_STATES)

JOB_COLUMNS = ("id", "queue", "task", "state", "attempts", "run_at", "worker", "error")
SERVICE_COLUMNS = ("id", "queue", "task", "state", "uptime", "attempts", "worker", "error")
EVENT_COLUMNS = ("at", "kind", "attempt", "worker", "token", "detail")

# Results of pgsched.cancel / pgsched.retry that mean the request could not be met.
REFUSED = frozenset({"not_found", "not_retryable", "busy"})


# -- jobs ----------------------------------------------------------------------


def find_job(conn: Conn, job_id: int) -> dict[str, Any] | None:
    return conn.execute(queries.SHOW_JOB, {"id": job_id}).fetchone()


def summary(row: dict[str, Any]) -> dict[str, Any]:
    """A listed job: the error cut to one line (a traceback's exception), attempts as 'n/max' for tables."""
    out = dict(row)
    out["error"] = first_line(row.get("error"))
    out["attempts"] = f"{row['attempt']}/{row['max_attempts']}"
    uptime = row.get("uptime")
    out["uptime_s"] = None if uptime is None else round(uptime.total_seconds(), 3)
    out["uptime"] = None if uptime is None else _uptime(uptime)
    return out


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    """A listed job for --json: uptime in seconds only."""
    return {k: v for k, v in row.items() if k not in ("attempts", "uptime")}


def _uptime(value: timedelta) -> str:
    """1d 02:03:04, or 02:03:04 under a day."""
    seconds = max(0, int(value.total_seconds()))
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}d {clock}" if days else clock


@click.group()
def jobs() -> None:
    """List, inspect, cancel and retry jobs."""


@jobs.command("list")
@click.option(
    "--state",
    "states",
    type=click.Choice(STATES),
    multiple=True,
    help="Only jobs in this state (repeat for several).",
)
@click.option("--queue", "-q", default=None, help="Only jobs of this queue.")
@click.option("--task", default=None, help="Only jobs of this task.")
@click.option("--services", is_flag=True, help="Only service jobs (with their uptime).")
@click.option("--limit", type=click.IntRange(1, None), default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
@handle_errors
def list_jobs(
    ctx: click.Context,
    states: tuple[str, ...],
    queue: str | None,
    task: str | None,
    services: bool,
    limit: int,
    as_json: bool,
) -> None:
    """List jobs, newest (highest id) first: active ones and finished ones alike.

    Each job appears once, in its current state. Errors show their first
    line; `pgsched jobs show ID` has the full text and the audit trail.
    Service jobs show their uptime (since their current run started); the
    table gets that column when it lists one, --json has uptime_s.
    """
    params = {"states": list(states) or None, "queue": queue, "task": task, "limit": limit, "services": services}
    with state(ctx).connect() as conn:
        rows = [summary(r) for r in conn.execute(queries.LIST_JOBS, params).fetchall()]
    if as_json:
        emit_json([_json_row(r) for r in rows])
    elif rows:
        emit_table(rows, SERVICE_COLUMNS if any(r["service"] for r in rows) else JOB_COLUMNS)
    else:
        click.echo("no jobs match")


@jobs.command("show")
@click.argument("job_id", type=int, metavar="ID")
@click.option("--json", "as_json", is_flag=True, help='Print {"job": {...}, "events": [...]} as JSON.')
@click.pass_context
@handle_errors
def show_job(ctx: click.Context, job_id: int, as_json: bool) -> None:
    """Show job ID wherever it is (queued, running or finished), its audit events and its full error."""
    with state(ctx).connect() as conn:
        job = find_job(conn, job_id)
        if job is None:
            fail(f"job {job_id} not found (finished jobs are kept for the history retention only)")
        events = conn.execute(queries.JOB_TIMELINE, {"id": job_id}).fetchall()
    if as_json:
        emit_json({"job": job, "events": events})
        return
    _print_job(job, events)


def _print_job(job: dict[str, Any], events: Sequence[dict[str, Any]]) -> None:
    from rich.table import Table
    from rich.text import Text

    fields = Table(show_header=False, box=None, pad_edge=False)
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")
    for key, value in job.items():
        if key in _SHOWN_APART or value in (None, [], "") or (key == "service" and not value):
            continue
        text = _json_text(value) if isinstance(value, dict | list) else cell(value)
        fields.add_row(key, Text(text))
    result = job.get("result")
    streams = _command_streams(job)
    if streams and isinstance(result, dict):
        for key in ("exit_code", "signal", "timed_out", "duration_s", "stdout_bytes", "stderr_bytes"):
            if key in result:
                fields.add_row(key, Text(cell(result[key])))
    elif result is not None:
        fields.add_row("result", Text(_json_text(result)))
    if job.get("progress") is not None:
        fields.add_row(
            "progress", Text(progress_text(job["progress"], job.get("progress_note"), job.get("progress_at")))
        )
    fields.add_row("stored in", Text(f"pgsched.{job['table']}"))
    out = console()
    out.print(fields)
    if job.get("steps"):
        out.print()
        out.print(build_table(_step_rows(job["steps"]), STEP_COLUMNS, title="steps"))
    if events:
        out.print()
        out.print(build_table(events, EVENT_COLUMNS, title="events"))
    for name, text in streams:
        click.echo(f"\n{name}:")
        click.echo(printable(text.rstrip("\n"), lines=True))
    if job.get("error"):
        click.echo("\nerror:")
        click.echo(printable(job["error"], lines=True))


_SHOWN_APART = ("table", "error", "result", "progress", "progress_note", "progress_at", "steps")
STEP_COLUMNS = ("step", "attempt", "at", "worker", "result")


def progress_text(fraction: float, note: str | None, at: Any) -> str:
    """A progress report as one line: '42% note (at ...)'."""
    text = f"{fraction * 100:.0f}%"
    if note:
        text += f" {note}"
    return f"{text} (at {cell(at)})" if at is not None else text


def _step_rows(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's durable steps for the table: their results as short JSON (``--json`` has them whole)."""
    rows = []
    for step in steps:
        shown = _json_text(step.get("result"))
        rows.append(
            {
                "step": step.get("name"),
                "attempt": step.get("attempt"),
                "at": step.get("at"),
                "worker": step.get("worker"),
                "result": shown if len(shown) <= 80 else shown[:77] + "...",
            }
        )
    return rows


def _command_streams(job: dict[str, Any]) -> list[tuple[str, str]]:
    """A command job's output, shown as text blocks (the tails kept in its result); [] for other jobs."""
    from pgsched.runtime.commands import COMMAND_TASK, OUTPUT_CAP

    result = job.get("result")
    if job.get("task") != COMMAND_TASK or not isinstance(result, dict) or "exit_code" not in result:
        return []
    blocks = []
    for name in ("stdout", "stderr"):
        text = result.get(name) or ""
        total = result.get(f"{name}_bytes") or 0
        title = f"{name} (last {OUTPUT_CAP // 1024} kB of {total} bytes)" if total > OUTPUT_CAP else name
        blocks.append((title, text if text else "(empty)"))
    return blocks


def _json_text(value: Any) -> str:
    return json.dumps(value, default=str)


def run_each(conn: Conn, query: str, ids: Iterable[int]) -> list[dict[str, Any]]:
    """Call pgsched.cancel or pgsched.retry once per id, each in its own transaction."""
    results = []
    for job_id in ids:
        row = conn.execute(query, [job_id]).fetchone()
        results.append({"id": job_id, "result": row["result"] if row else None})
    return results


def report_results(results: Sequence[dict[str, Any]], as_json: bool, *, lines: bool = True) -> None:
    """Print one line per job (or JSON); exit 1 when any request was refused."""
    if as_json:
        emit_json(list(results))
    elif lines:
        for item in results:
            click.echo(f"{item['id']}: {item['result']}")
    if any(item["result"] in REFUSED for item in results):
        sys.exit(1)


@jobs.command("cancel")
@click.argument("job_ids", type=int, nargs=-1, required=True, metavar="ID...")
@click.option("--json", "as_json", is_flag=True, help='Print [{"id": ..., "result": ...}] as JSON.')
@click.pass_context
@handle_errors
def cancel_jobs(ctx: click.Context, job_ids: tuple[int, ...], as_json: bool) -> None:
    """Cancel jobs and print what happened to each.

    \b
    cancelled           it was waiting; it will never run
    cancel_requested    it is claimed or running; its worker is told at once
                        (within a second), a claimed job never starts, and a
                        run ends as cancelled unless it had already succeeded
    already_<state>     it had finished; nothing changed
    not_found           no such job (exit status 1)
    """
    with state(ctx).connect() as conn:
        results = run_each(conn, queries.CANCEL_JOB, job_ids)
    report_results(results, as_json)


@jobs.command("retry")
@click.argument("job_ids", type=int, nargs=-1, required=True, metavar="ID...")
@click.option("--json", "as_json", is_flag=True, help='Print [{"id": ..., "result": ...}] as JSON.')
@click.pass_context
@handle_errors
def retry_jobs(ctx: click.Context, job_ids: tuple[int, ...], as_json: bool) -> None:
    """Re-enqueue dead or cancelled jobs (due now, with a fresh attempt budget).

    \b
    retried         it is queued again under the same id
    active          it is queued or running already; nothing changed
    not_retryable   it completed (exit status 1)
    not_found       no such job (exit status 1)
    """
    with state(ctx).connect() as conn:
        results = run_each(conn, queries.RETRY_JOB, job_ids)
    report_results(results, as_json)


def register(group: click.Group) -> None:
    group.add_command(jobs)
