"""`pgsched enqueue`: a job (or a service) of a task by name, with JSON args, from the command line."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import Any

import click
from psycopg.types.json import Jsonb

from pgsched.cli.command import CPUS_HELP, MEMORY_HELP, cpus_callback, memory_callback
from pgsched.cli.common import (
    duration_callback,
    emit_json,
    fail,
    handle_errors,
    parse_json_object,
    split_csv,
    state,
    timestamp_callback,
)
from pgsched.cli.jobs import Conn, find_job
from pgsched.core.limits import MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN, PRIORITY_MAX, PRIORITY_MIN
from pgsched.core.policies import ConflictPolicy, DependencyPolicy, KeyScope, values
from pgsched.db import queries


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
    type=click.IntRange(MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX),
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
    type=click.Choice(values(DependencyPolicy)),
    default=None,
    help="A dependency ending dead or cancelled cancels this job, leaves it waiting for a redrive, or (run) "
    "lets it run once every dependency finished, whatever the outcome.  [default: cancel]",
)
@click.option(
    "--on-conflict",
    type=click.Choice(values(ConflictPolicy)),
    default=ConflictPolicy.KEEP.value,
    show_default=True,
    help="A key already held: keep that job as it is, or replace its args, run time and priority while it has "
    "not started (a debounce: each enqueue pushes the run later).",
)
@click.option(
    "--key-scope",
    type=click.Choice(values(KeyScope)),
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
    if on_conflict == ConflictPolicy.REPLACE and idempotency_key is None:
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
        row = conn.execute(queries.ENQUEUE_SERVICE_NAMED if service else queries.ENQUEUE_NAMED, params).fetchone()
        assert row is not None
        job_id = int(row["id"])
        if as_json:
            job = find_job(conn, job_id) or {"id": job_id}
            emit_json({k: job.get(k) for k in ("id", "queue", "task", "state", "run_at", "table")})
            return
    click.echo(job_id)


def _check_task_name(conn: Conn, task: str) -> None:
    from pgsched.cli.tasks import close_tasks

    close = close_tasks(conn, task)
    if close:
        suggestion = " or ".join(repr(name) for name in close)
        fail(f"task {task!r} is not registered; did you mean {suggestion}? (--force enqueues it anyway)")


def register(group: click.Group) -> None:
    group.add_command(enqueue)
