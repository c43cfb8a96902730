"""`pgsched dlq`: the dead letters (jobs that used up their attempts), listed and redriven."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from pgsched.cli.common import (
    emit_json,
    emit_table,
    fail,
    handle_errors,
    state,
)
from pgsched.cli.jobs import Conn, report_results, run_each, summary
from pgsched.db import queries

DEAD_COLUMNS = ("id", "queue", "task", "attempts", "died_at", "last_worker", "error")
REDRIVE_BATCH = 500


def _list_dead(ctx: click.Context, queue: str | None, limit: int, as_json: bool) -> None:
    with state(ctx).connect() as conn:
        rows = conn.execute(queries.DEAD_LETTERS, {"queue": queue, "limit": limit}).fetchall()
        total = _count_dead(conn, queue) if not as_json and len(rows) == limit else len(rows)
    rows = [summary(r) for r in rows]
    if as_json:
        emit_json([{k: v for k, v in r.items() if k != "attempts"} for r in rows])
    elif rows:
        title = f"dead letters ({total})" if total == len(rows) else f"dead letters ({len(rows)} of {total})"
        emit_table(rows, DEAD_COLUMNS, title=title)
        click.echo("redrive: pgsched dlq retry ID... (or --all); full error: pgsched jobs show ID")
    else:
        click.echo("no dead letters")


def _count_dead(conn: Conn, queue: str | None) -> int:
    row = conn.execute(queries.COUNT_DEAD_LETTERS, [queue, queue]).fetchone()
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
            report_results(run_each(conn, queries.RETRY_JOB, job_ids), as_json)
            return
        ids = [int(r["id"]) for r in conn.execute(queries.DEAD_LETTER_IDS, [queue, queue]).fetchall()]
        _confirm_all(len(ids), queue, yes)
        results = _redrive(conn, ids)
    report_results(results, as_json, lines=False)
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
        results.extend(conn.execute(queries.RETRY_EACH, [batch]).fetchall())
    return results


def register(group: click.Group) -> None:
    group.add_command(dlq)
