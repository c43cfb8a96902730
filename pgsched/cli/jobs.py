"""`pgsched enqueue`, `pgsched jobs` and `pgsched dlq`: put work in, look at it, cancel and redrive it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import click
import psycopg
from psycopg.types.json import Jsonb

from pgsched.cli.command import CPUS_HELP, MEMORY_HELP, cpus_callback, memory_callback
from pgsched.cli.common import (
    build_table,
    cell,
    console,
    duration_callback,
    emit_json,
    emit_table,
    fail,
    first_line,
    handle_errors,
    parse_json_object,
    printable,
    split_csv,
    state,
    timestamp_callback,
)
from pgsched.core.task import PRIORITY_MAX, PRIORITY_MIN

Conn = psycopg.Connection[dict[str, Any]]

STATES = ("scheduled", "waiting", "available", "running", "completed", "dead", "cancelled")

# Each value cast to the parameter's type: a bad value is refused as such,
# never as a missing function.
ENQUEUE = """
SELECT pgsched.enqueue(
    task => %(task)s::text, args => %(args)s::jsonb, queue => %(queue)s::text,
    run_at => coalesce(%(run_at)s::timestamptz, pg_catalog.now() + %(delay)s::interval),
    priority => %(priority)s::integer, idempotency_key => %(key)s::text, max_attempts => %(max_attempts)s::integer,
    labels => %(labels)s::text[], tenant => %(tenant)s::text,
    depends_on => %(depends_on)s::bigint[], on_dependency_failure => %(on_failure)s::text,
    on_conflict => %(on_conflict)s::text, key_scope => %(key_scope)s::text) AS id
"""

ENQUEUE_SERVICE = """
SELECT pgsched.enqueue_service(
    task => %(task)s::text, args => %(args)s::jsonb, queue => %(queue)s::text,
    run_at => coalesce(%(run_at)s::timestamptz, pg_catalog.now() + %(delay)s::interval),
    priority => %(priority)s::integer, idempotency_key => %(key)s::text, max_attempts => %(max_attempts)s::integer,
    labels => %(labels)s::text[], tenant => %(tenant)s::text,
    memory_limit => %(memory_limit)s::integer, cpu_limit => %(cpu_limit)s::real) AS id
"""

# One row per job, newest id first: the active row when there is one, else
# the latest history row (a redriven job has several). Both halves walk their
# id indexes backwards and stop at the limit; the one-time filters on the
# states skip a table that cannot hold the states asked for.
LIST_JOBS = """
WITH active AS (
    SELECT j.id, j.queue, j.task, j.state::text AS state, j.attempt, j.max_attempts, j.run_at,
           j.leased_by AS worker, j.last_error AS error, j.created_at, NULL::timestamptz AS finished_at, j.service,
           -- a service's uptime: since its current run started
           CASE WHEN j.service AND j.state = 'running' THEN pg_catalog.now() - coalesce(j.started_at, j.claimed_at)
           END AS uptime
    FROM pgsched.jobs j
    WHERE (%(states)s::text[] IS NULL OR %(states)s::text[] && ARRAY['scheduled', 'waiting', 'available', 'running'])
      AND (NOT %(services)s OR j.service)
      AND (%(states)s::text[] IS NULL OR j.state = ANY (%(states)s::text[]::pgsched.job_state[]))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
    ORDER BY j.id DESC
    LIMIT %(limit)s
), finished AS (
    SELECT h.id, h.queue, h.task, h.state::text AS state, h.attempt, h.max_attempts, h.run_at,
           h.leased_by AS worker, h.error, h.created_at, h.finished_at, h.service, NULL::interval AS uptime
    FROM pgsched.job_history h
    WHERE (%(states)s::text[] IS NULL OR %(states)s::text[] && ARRAY['completed', 'dead', 'cancelled'])
      AND (NOT %(services)s OR h.service)
      AND (%(states)s::text[] IS NULL OR h.state = ANY (%(states)s::text[]::pgsched.job_state[]))
      AND (%(queue)s::text IS NULL OR h.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR h.task = %(task)s::text)
      AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = h.id)
      AND NOT EXISTS (
          SELECT 1 FROM pgsched.job_history h2 WHERE h2.id = h.id AND h2.finished_at > h.finished_at)
    ORDER BY h.id DESC
    LIMIT %(limit)s
)
SELECT * FROM active
UNION ALL
SELECT * FROM finished
ORDER BY id DESC
LIMIT %(limit)s
"""

# The job wherever it is: its active row, else its latest history row.
SHOW_JOB = """
SELECT * FROM (
    SELECT 'jobs' AS "table", j.id, j.state::text AS state, j.queue, j.task, j.args, j.priority, j.run_at,
           j.attempt, j.max_attempts, j.leased_by AS worker, j.lease_token, j.lease_expires_at,
           j.cancel_requested_at, j.idempotency_key, j.labels, j.tenant, j.shard, j.created_at,
           j.started_at, NULL::timestamptz AS finished_at, NULL::jsonb AS result, j.last_error AS error, j.service,
           j.progress, j.progress_note, j.progress_at, j.steps
    FROM pgsched.jobs j
    WHERE j.id = %(id)s
    UNION ALL
    (SELECT 'job_history', h.id, h.state::text, h.queue, h.task, h.args, h.priority, h.run_at,
            h.attempt, h.max_attempts, h.leased_by, h.lease_token, NULL, NULL, h.idempotency_key,
            h.labels, h.tenant, h.shard, h.created_at, h.started_at, h.finished_at, h.result, h.error, h.service,
            h.progress, h.progress_note, h.progress_at, h.steps
     FROM pgsched.job_history h
     WHERE h.id = %(id)s
     ORDER BY h.finished_at DESC
     LIMIT 1)
) found
ORDER BY ("table" = 'jobs') DESC
LIMIT 1
"""

JOB_EVENTS = """
SELECT e.at, e.kind, e.attempt, e.worker, e.token, e.detail
FROM pgsched.job_timeline e
WHERE e.job_id = %s
"""

LIST_DEAD = """
SELECT d.id, d.queue, d.task, d.args, d.attempt, d.max_attempts, d.error, d.died_at, d.last_worker,
       d.created_at, d.idempotency_key, d.labels, d.tenant
FROM pgsched.dead_letters d
WHERE %(queue)s::text IS NULL OR d.queue = %(queue)s::text
ORDER BY d.died_at DESC, d.id DESC
LIMIT %(limit)s
"""

COUNT_DEAD = "SELECT count(*) AS n FROM pgsched.dead_letters d WHERE %s::text IS NULL OR d.queue = %s::text"

DEAD_IDS = "SELECT d.id FROM pgsched.dead_letters d WHERE %s::text IS NULL OR d.queue = %s::text ORDER BY d.id"

CANCEL_ONE = "SELECT pgsched.cancel(%s::bigint) AS result"

RETRY_ONE = "SELECT pgsched.retry(%s::bigint) AS result"

RETRY_MANY = "SELECT t.id, pgsched.retry(t.id) AS result FROM unnest(%s::bigint[]) AS t(id)"

JOB_COLUMNS = ("id", "queue", "task", "state", "attempts", "run_at", "worker", "error")
SERVICE_COLUMNS = ("id", "queue", "task", "state", "uptime", "attempts", "worker", "error")
DEAD_COLUMNS = ("id", "queue", "task", "attempts", "died_at", "last_worker", "error")
EVENT_COLUMNS = ("at", "kind", "attempt", "worker", "token", "detail")

# Results of pgsched.cancel / pgsched.retry that mean the request could not be met.
REFUSED = frozenset({"not_found", "not_retryable", "busy"})
REDRIVE_BATCH = 500


# -- enqueue -------------------------------------------------------------------


def _read_args(args_json: str | None) -> dict[str, Any]:
    text = "{}" if args_json is None else args_json
    if text == "-":
        text = sys.stdin.read()
    try:
        return parse_json_object(text)
    except ValueError as exc:
        fail(str(exc))


@click.command()
@click.argument("task")
@click.argument("args_json", required=False, metavar="[ARGS_JSON]")
@click.option(
    "--queue",
    "-q",
    default=None,
    help="Queue to put the job on (a task's registered queue is not looked up here).  [default: default]",
)
@click.option(
    "--delay",
    callback=duration_callback,
    metavar="DURATION",
    help="Run no sooner than this from now (database clock): 30s, 5m, 2h, 1d, 1h30m or seconds.",
)
@click.option(
    "--run-at",
    callback=timestamp_callback,
    metavar="ISO8601",
    help="Run no sooner than this time, e.g. 2030-01-31T09:00:00+01:00 (no offset means UTC).",
)
@click.option(
    "--priority",
    type=click.IntRange(PRIORITY_MIN, PRIORITY_MAX),
    default=None,
    help=f"Higher runs first, {PRIORITY_MIN} to {PRIORITY_MAX}.  [default: 0]",
)
@click.option(
    "--idempotency-key",
    default=None,
    help="Enqueue at most once per key: a repeated key prints the existing job's id and adds nothing.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 2**31 - 1),
    default=None,
    help="Runs before the job goes to the dead letters.  [default: the task's, else the install's]",
)
@click.option("--labels", default=None, help="Comma-separated labels a worker must offer to run the job.")
@click.option("--tenant", default=None, help="Tenant the job belongs to.")
@click.option(
    "--depends-on",
    "depends_on",
    type=click.IntRange(1),
    multiple=True,
    help="A job id this job waits for (repeatable): it runs once every one completed.",
)
@click.option(
    "--on-dependency-failure",
    type=click.Choice(["cancel", "wait", "run"]),
    default=None,
    help="A dependency ending dead or cancelled cancels this job, leaves it waiting for a redrive, or (run) "
    "lets it run once every dependency finished, whatever the outcome.  [default: cancel]",
)
@click.option(
    "--on-conflict",
    type=click.Choice(["keep", "replace"]),
    default="keep",
    show_default=True,
    help="A key already held: keep that job as it is, or replace its args, run time and priority while it has "
    "not started (a debounce: each enqueue pushes the run later).",
)
@click.option(
    "--key-scope",
    type=click.Choice(["active", "retention"]),
    default=None,
    help="How long the idempotency key is held: while the job is active, or also for the retention after it "
    "ended.  [default: retention]",
)
@click.option(
    "--force",
    is_flag=True,
    help="Enqueue even when TASK is not registered but close to a registered task's name.",
)
@click.option("--service", is_flag=True, help="A service job: runs until cancelled (docs/services.md).")
@click.option("--memory", callback=memory_callback, default=None, metavar="SIZE", help=MEMORY_HELP + " Services only.")
@click.option("--cpus", type=float, callback=cpus_callback, default=None, help=CPUS_HELP + " Services only.")
@click.option("--json", "as_json", is_flag=True, help="Print the job (id, queue, state, run_at) as JSON.")
@click.pass_context
@handle_errors
def enqueue(
    ctx: click.Context,
    task: str,
    args_json: str | None,
    queue: str | None,
    delay: timedelta | None,
    run_at: datetime | None,
    priority: int | None,
    idempotency_key: str | None,
    max_attempts: int | None,
    labels: str | None,
    tenant: str | None,
    depends_on: tuple[int, ...],
    on_dependency_failure: str | None,
    force: bool,
    service: bool,
    memory: int | None,
    cpus: float | None,
    on_conflict: str,
    key_scope: str | None,
    as_json: bool,
) -> None:
    """Enqueue a job of TASK with ARGS_JSON, a JSON object (default {}; '-' reads it from stdin).

    Prints the job id. Invalid arguments are refused with exit status 1 and
    nothing is enqueued. A TASK that is not registered (pgsched.tasks: by a
    worker, or `pgsched tasks sync`) but is close to a registered name is
    taken for a typo and refused with a suggestion, unless --force is given;
    one unlike any registered name is enqueued (its worker may come later).

    \b
    Examples:
      pgsched enqueue app.send_welcome '{"user_id": 42}' --queue emails
      pgsched enqueue reports.build --delay 5m --idempotency-key report-2030-01-31
      echo '{"n": 1}' | pgsched enqueue app.count - --run-at 2030-01-31T09:00:00Z
      pgsched enqueue reports.merge --depends-on 41 --depends-on 42
      pgsched enqueue ingest.consume '{"topic": "orders"}' --service --memory 256M --cpus 0.5
      pgsched enqueue search.reindex --idempotency-key user:7 --delay 5s --on-conflict replace
    """
    if on_conflict == "replace" and idempotency_key is None:
        raise click.UsageError("--on-conflict replace needs --idempotency-key (the job to replace)", ctx=ctx)
    if key_scope is not None and idempotency_key is None:
        raise click.UsageError("--key-scope needs --idempotency-key", ctx=ctx)
    if delay is not None and run_at is not None:
        raise click.UsageError("pass either --delay or --run-at, not both", ctx=ctx)
    if (memory is not None or cpus is not None) and not service:
        raise click.UsageError(
            "--memory and --cpus limit services (--service) and command jobs (enqueue-command)", ctx=ctx
        )
    if service and (depends_on or on_dependency_failure):
        raise click.UsageError("a service (--service) takes no --depends-on", ctx=ctx)
    params = {
        "task": task,
        "args": Jsonb(_read_args(args_json)),
        "queue": queue,
        "run_at": run_at,
        "delay": delay,
        "priority": priority,
        "key": idempotency_key,
        "max_attempts": max_attempts,
        "labels": split_csv(labels),
        "tenant": tenant,
        "depends_on": list(depends_on) or None,
        "on_failure": on_dependency_failure,
        "memory_limit": memory,
        "cpu_limit": cpus,
        "on_conflict": on_conflict,
        "key_scope": key_scope,
    }
    with state(ctx).connect() as conn:
        if not force:
            _check_task_name(conn, task)
        row = conn.execute(ENQUEUE_SERVICE if service else ENQUEUE, params).fetchone()
        assert row is not None
        job_id = int(row["id"])
        if as_json:
            job = _find_job(conn, job_id) or {"id": job_id}
            emit_json({k: job.get(k) for k in ("id", "queue", "task", "state", "run_at", "table")})
            return
    click.echo(job_id)


def _check_task_name(conn: Conn, task: str) -> None:
    from pgsched.cli.tasks import close_tasks

    close = close_tasks(conn, task)
    if close:
        suggestion = " or ".join(repr(name) for name in close)
        fail(f"task {task!r} is not registered; did you mean {suggestion}? (--force enqueues it anyway)")


# -- jobs ----------------------------------------------------------------------


def _find_job(conn: Conn, job_id: int) -> dict[str, Any] | None:
    return conn.execute(SHOW_JOB, {"id": job_id}).fetchone()


def _summary(row: dict[str, Any]) -> dict[str, Any]:
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
        rows = [_summary(r) for r in conn.execute(LIST_JOBS, params).fetchall()]
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
        job = _find_job(conn, job_id)
        if job is None:
            fail(f"job {job_id} not found (finished jobs are kept for the history retention only)")
        events = conn.execute(JOB_EVENTS, [job_id]).fetchall()
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


def _run_each(conn: Conn, query: str, ids: Iterable[int]) -> list[dict[str, Any]]:
    """Call pgsched.cancel or pgsched.retry once per id, each in its own transaction."""
    results = []
    for job_id in ids:
        row = conn.execute(query, [job_id]).fetchone()
        results.append({"id": job_id, "result": row["result"] if row else None})
    return results


def _report(results: Sequence[dict[str, Any]], as_json: bool, *, lines: bool = True) -> None:
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
        results = _run_each(conn, CANCEL_ONE, job_ids)
    _report(results, as_json)


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
        results = _run_each(conn, RETRY_ONE, job_ids)
    _report(results, as_json)


# -- dead letters --------------------------------------------------------------


def _list_dead(ctx: click.Context, queue: str | None, limit: int, as_json: bool) -> None:
    with state(ctx).connect() as conn:
        rows = conn.execute(LIST_DEAD, {"queue": queue, "limit": limit}).fetchall()
        total = _count_dead(conn, queue) if not as_json and len(rows) == limit else len(rows)
    rows = [_summary(r) for r in rows]
    if as_json:
        emit_json([{k: v for k, v in r.items() if k != "attempts"} for r in rows])
    elif rows:
        title = f"dead letters ({total})" if total == len(rows) else f"dead letters ({len(rows)} of {total})"
        emit_table(rows, DEAD_COLUMNS, title=title)
        click.echo("redrive: pgsched dlq retry ID... (or --all); full error: pgsched jobs show ID")
    else:
        click.echo("no dead letters")


def _count_dead(conn: Conn, queue: str | None) -> int:
    row = conn.execute(COUNT_DEAD, [queue, queue]).fetchone()
    return int(row["n"]) if row else 0


_QUEUE_OPTION = click.option("--queue", "-q", default=None, help="Only dead jobs of this queue.")
_LIMIT_OPTION = click.option(
    "--limit", type=click.IntRange(1, None), default=50, show_default=True, help="At most this many."
)
_JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")


@click.group(invoke_without_command=True)
@_QUEUE_OPTION
@_LIMIT_OPTION
@_JSON_OPTION
@click.pass_context
@handle_errors
def dlq(ctx: click.Context, queue: str | None, limit: int, as_json: bool) -> None:
    """List dead letters (jobs that used up their attempts), most recent first; redrive them.

    Errors show one line (for a traceback, the exception raised); `pgsched jobs show ID` has the
    full text.
    """
    if ctx.invoked_subcommand is None:
        _list_dead(ctx, queue, limit, as_json)


@dlq.command("list")
@_QUEUE_OPTION
@_LIMIT_OPTION
@_JSON_OPTION
@click.pass_context
@handle_errors
def dlq_list(ctx: click.Context, queue: str | None, limit: int, as_json: bool) -> None:
    """List dead letters, most recent first (the same as `pgsched dlq`)."""
    _list_dead(ctx, queue, limit, as_json)


@dlq.command("retry")
@click.argument("job_ids", type=int, nargs=-1, metavar="[ID]...")
@click.option("--all", "redrive_all", is_flag=True, help="Redrive every dead letter (of --queue, if given).")
@click.option("--queue", "-q", default=None, help="With --all: only the dead letters of this queue.")
@click.option("--yes", "-y", is_flag=True, help="With --all: do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help='Print [{"id": ..., "result": ...}] as JSON.')
@click.pass_context
@handle_errors
def dlq_retry(
    ctx: click.Context,
    job_ids: tuple[int, ...],
    redrive_all: bool,
    queue: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    """Redrive dead letters: queue them again, due now, with a fresh attempt budget.

    Give job IDs, or --all (optionally with --queue) to redrive every dead
    letter; --all asks for confirmation unless --yes is given, and refuses
    to run without --yes when stdin is not a terminal.
    """
    if bool(job_ids) == redrive_all:
        raise click.UsageError("give job IDs or --all (not both)", ctx=ctx)
    if queue is not None and not redrive_all:
        raise click.UsageError("--queue only applies with --all", ctx=ctx)
    with state(ctx).connect() as conn:
        if not redrive_all:
            _report(_run_each(conn, RETRY_ONE, job_ids), as_json)
            return
        ids = [int(r["id"]) for r in conn.execute(DEAD_IDS, [queue, queue]).fetchall()]
        _confirm_all(len(ids), queue, yes)
        results = _redrive(conn, ids)
    _report(results, as_json, lines=False)
    if not as_json:
        where = f" of queue {queue}" if queue else ""
        done = sum(1 for r in results if r["result"] == "retried")
        click.echo(f"redrove {done} of {len(ids)} dead letters{where}")


def _confirm_all(count: int, queue: str | None, yes: bool) -> None:
    if count == 0:
        click.echo("no dead letters to redrive", err=True)
        sys.exit(0)
    if yes:
        return
    where = f" of queue {queue}" if queue else ""
    if not sys.stdin.isatty():
        fail(f"--all would redrive {count} dead letters{where}; add --yes to confirm")
    click.confirm(f"Redrive {count} dead letters{where}?", abort=True)


def _redrive(conn: Conn, ids: Sequence[int]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for start in range(0, len(ids), REDRIVE_BATCH):
        batch = list(ids[start : start + REDRIVE_BATCH])
        results.extend(conn.execute(RETRY_MANY, [batch]).fetchall())
    return results


def register(group: click.Group) -> None:
    group.add_command(enqueue)
    group.add_command(jobs)
    group.add_command(dlq)
