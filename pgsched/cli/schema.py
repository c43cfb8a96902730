"""`pgsched migrate`: install or upgrade the schema."""

from __future__ import annotations

import click

from pgsched.cli.common import emit_json, handle_errors, state


@click.command()
@click.option(
    "--shards",
    type=click.IntRange(1, 256),
    default=None,
    help="Number of shards of pgsched.jobs, fixed at install (default 8). Ignored on upgrade.",
)
@click.option("--revision", default="head", show_default=True, help="Alembic revision to upgrade to.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
@handle_errors
def migrate(ctx: click.Context, shards: int | None, revision: str, as_json: bool) -> None:
    """Install pgsched into the database, or upgrade it to the newest revision."""
    from pgsched.db import schema

    dsn = state(ctx).resolve(migrate=False)
    before, after = schema.migrate(dsn, shards=shards, revision=revision)
    if as_json:
        emit_json({"before": before, "after": after})
    elif before == after:
        click.echo(f"pgsched schema is up to date (revision {after})")
    else:
        click.echo(f"pgsched schema migrated: {before or 'not installed'} -> {after}")


def register(group: click.Group) -> None:
    group.add_command(migrate)
