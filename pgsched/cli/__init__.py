"""The `pgsched` command line: one click group; each command family lives in a module of its own."""

from __future__ import annotations

import importlib
import logging
import sys

import click

from pgsched.cli.common import CliState, configure_logging
from pgsched.cli.globals import accept_global_options
from pgsched.observe.redact import remember

COMMAND_MODULES = (
    "schema",
    "worker",
    "schedules",
    "jobs",
    "enqueue",
    "dlq",
    "command",
    "stats",
    "queues",
    "db",
    "demo",
    "bench",
    "dashboard",
    "doctor",
    "events",
    "tasks",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "PGSCHED"})
@click.option(
    "--dsn",
    envvar=["PGSCHED_DSN", "DATABASE_URL"],
    help="PostgreSQL DSN. Default: $PGSCHED_DSN, then $DATABASE_URL, then the embedded server.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    envvar="PGSCHED_LOG_LEVEL",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    envvar="PGSCHED_LOG_FORMAT",
)
@click.version_option(package_name="pgsched")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, log_level: str, log_format: str) -> None:
    """pgsched: jobs and schedules, with PostgreSQL as the scheduler."""
    configure_logging(log_level, log_format)
    remember(dsn)
    ctx.obj = CliState(dsn=dsn, log_level=log_level, log_format=log_format)


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"pgsched.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"pgsched.cli.{name}":
                continue
            raise
        module.register(main)
    accept_global_options(main)


_register()


def run() -> None:  # pragma: no cover - console entry point
    try:
        main()
    except KeyboardInterrupt:
        logging.getLogger("pgsched").info("interrupted")
        sys.exit(130)
