"""`pgsched tasks sync`: register an app's task policies without starting a worker; and the task-name check
`pgsched enqueue` makes (a name close to a registered one is taken for a typo)."""

from __future__ import annotations

import difflib
from typing import Any

import click
import psycopg

from pgsched.cli.common import emit_json, handle_errors, state
from pgsched.db import queries

# How alike two names must be (difflib's ratio) for one to be offered as the other.
CLOSE = 0.8


def close_tasks(conn: psycopg.Connection[Any], name: str) -> list[str]:
    """Registered task names close to ``name``, best first; [] when ``name`` is registered or unlike any.

    A login that may not read pgsched.tasks gets [] (no check rather than a refused enqueue)."""
    try:
        with conn.transaction():
            rows = conn.execute(queries.TASK_NAMES).fetchall()
    except psycopg.errors.InsufficientPrivilege:
        return []
    names = [str(row["name"]) for row in rows]
    if name in names:
        return []
    by_case = [n for n in names if n.lower() == name.lower()]
    return by_case or difflib.get_close_matches(name, names, n=3, cutoff=CLOSE)


@click.group()
def tasks() -> None:
    """Task policies in the database (pgsched.tasks)."""


@tasks.command("sync")
@click.option(
    "--app",
    "app_ref",
    required=True,
    envvar="PGSCHED_APP",
    help="MODULE:ATTRIBUTE of a pgsched.App whose tasks to register.",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"tasks": [...], "changed": N} as JSON.')
@click.pass_context
@handle_errors
def sync(ctx: click.Context, app_ref: str, as_json: bool) -> None:
    """Register the app's tasks (queue, max_attempts, backoff, timeout, labels) as a worker does at start.

    Until a task is registered, jobs enqueued from SQL or `pgsched enqueue` get the database's defaults
    (max_attempts 5, no timeout, no labels): run this at deploy time, before the first enqueue.
    """
    from pgsched.api.loader import load_app

    app = load_app(app_ref)
    app.configure(state(ctx).resolve())
    try:
        changed = app.sync_tasks()
    finally:
        app.close()
    names = sorted(app.tasks)
    if as_json:
        emit_json({"tasks": names, "changed": changed})
    else:
        click.echo(f"{len(names)} tasks registered ({changed} new or changed): {', '.join(names) or '-'}")


def register(group: click.Group) -> None:
    group.add_command(tasks)
