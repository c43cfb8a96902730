"""The global options (--dsn, --log-level, --log-format) also accepted after the subcommand, as users type them."""

from __future__ import annotations

import click

from pgsched.cli.common import configure_logging, state
from pgsched.observe.redact import remember

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


def _late_dsn(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        remember(value)
        state(ctx).dsn = value


def _late_log_level(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        current = state(ctx)
        current.log_level = value
        configure_logging(current.log_level, current.log_format)


def _late_log_format(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        current = state(ctx)
        current.log_format = value
        configure_logging(current.log_level, current.log_format)


def _options() -> list[click.Option]:
    # No envvar and no default here: the group reads the environment once, and an option given
    # after the subcommand overrides what the group resolved. Eager, so it applies before any
    # other option's callback might connect.
    return [
        click.Option(
            ["--dsn"],
            callback=_late_dsn,
            expose_value=False,
            is_eager=True,
            allow_from_autoenv=False,
            help="PostgreSQL DSN (also accepted before the command; see pgsched --help).",
        ),
        click.Option(
            ["--log-level"],
            type=click.Choice(LOG_LEVELS, case_sensitive=False),
            callback=_late_log_level,
            expose_value=False,
            is_eager=True,
            allow_from_autoenv=False,
            hidden=True,
        ),
        click.Option(
            ["--log-format"],
            type=click.Choice(LOG_FORMATS),
            callback=_late_log_format,
            expose_value=False,
            is_eager=True,
            allow_from_autoenv=False,
            hidden=True,
        ),
    ]


def _passes_arguments_on(command: click.Command) -> bool:
    """A command whose arguments go unparsed to another program (`bench`, `db psql`) keeps them all."""
    return any(isinstance(p, click.Argument) and p.type is click.UNPROCESSED for p in command.params)


def accept_global_options(group: click.Group) -> None:
    """Give every subcommand (and sub-group) of ``group`` the global options, unless it passes arguments on."""
    for command in group.commands.values():
        if _passes_arguments_on(command):
            continue
        names = {opt for param in command.params for opt in param.opts}
        command.params.extend(o for o in _options() if not names.intersection(o.opts))
        if isinstance(command, click.Group):
            accept_global_options(command)
