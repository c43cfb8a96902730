"""`pgsched db`: the embedded PostgreSQL server (start, stop, status, dsn, psql)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import click

from pgsched.cli.common import emit_json, fail, handle_errors

P = ParamSpec("P")
R = TypeVar("R")

_EMBEDDED_NOTE = (
    "Always the embedded server under $PGSCHED_HOME (default ~/.local/share/pgsched), "
    "even when --dsn, PGSCHED_DSN or DATABASE_URL point elsewhere."
)


def _server_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a failing pg_ctl or file system call into one line on stderr and exit status 1."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except subprocess.CalledProcessError as exc:
            output = (exc.stderr or exc.stdout or b"").strip()
            detail = output.decode(errors="replace") if isinstance(output, bytes) else str(output)
            fail(f"the embedded server failed: {exc}{': ' + detail if detail else ''}")
        except (subprocess.SubprocessError, OSError) as exc:
            fail(f"the embedded server failed: {exc}")

    return wrapper


def _start() -> str:
    """Start (or reuse) the embedded server, migrate it, and return its DSN."""
    from pgsched.db.embedded import EmbeddedServer
    from pgsched.db.schema import ensure_installed

    dsn = EmbeddedServer().start()
    ensure_installed(dsn)
    return dsn


def _status_dict() -> dict[str, object]:
    from pgsched.db.embedded import EmbeddedServer

    status = EmbeddedServer().status()
    return {
        "running": status.running,
        "pid": status.pid,
        "pgdata": str(status.pgdata),
        "version": status.version,
        "dsn": status.dsn,
    }


@click.group(help=f"Run the embedded PostgreSQL server (the default when no DSN is configured).\n\n{_EMBEDDED_NOTE}")
def db() -> None:
    pass


@db.command(
    help=f"Start the embedded server if it is not running, install or upgrade pgsched in it, and print "
    f"its DSN.\n\n{_EMBEDDED_NOTE}"
)
@click.option("--json", "as_json", is_flag=True, help="Print DSN, pid, data directory and version as JSON.")
@handle_errors
@_server_errors
def start(as_json: bool) -> None:
    dsn = _start()
    if as_json:
        emit_json(_status_dict() | {"dsn": dsn})
    else:
        click.echo(dsn)


@db.command(help=f"Stop the embedded server (fast shutdown: open sessions are ended).\n\n{_EMBEDDED_NOTE}")
@click.option("--json", "as_json", is_flag=True, help='Print {"stopped": true|false, ...} as JSON.')
@handle_errors
@_server_errors
def stop(as_json: bool) -> None:
    from pgsched.db.embedded import EmbeddedServer

    server = EmbeddedServer()
    stopped = server.stop()
    if as_json:
        emit_json({"stopped": stopped, "pgdata": str(server.pgdata)})
    elif stopped:
        click.echo(f"stopped the embedded server ({server.pgdata})")
    else:
        click.echo(f"the embedded server is not running ({server.pgdata})")


@db.command(
    help=f"Say whether the embedded server runs, with its pid, data directory, version and DSN. "
    f"Does not start it.\n\n{_EMBEDDED_NOTE}"
)
@click.option("--json", "as_json", is_flag=True, help="Print running, pid, pgdata, version and dsn as JSON.")
@handle_errors
@_server_errors
def status(as_json: bool) -> None:
    info = _status_dict()
    if as_json:
        emit_json(info)
        return
    running = f"yes (pid {info['pid']})" if info["running"] else "no (start it: pgsched db start)"
    click.echo(f"running   {running}")
    click.echo(f"data dir  {info['pgdata']}")
    if info["version"] is not None:
        click.echo(f"version   PostgreSQL {info['version']}")
    if info["dsn"]:
        click.echo(f"dsn       {info['dsn']}")


@db.command(
    help=f"Print only the embedded server's DSN, starting (and migrating) it if needed, so that "
    f'psql "$(pgsched db dsn)" works.\n\n{_EMBEDDED_NOTE}'
)
@click.option("--no-start", is_flag=True, help="Fail (exit status 1) instead of starting a stopped server.")
@click.option("--json", "as_json", is_flag=True, help='Print {"dsn": ...} as JSON.')
@handle_errors
@_server_errors
def dsn(no_start: bool, as_json: bool) -> None:
    current = _status_dict()["dsn"]
    if current is None:
        if no_start:
            fail("the embedded server is not running: start it with `pgsched db start`")
        current = _start()
    if as_json:
        emit_json({"dsn": current})
    else:
        click.echo(current)


@db.command(
    context_settings={"ignore_unknown_options": True, "help_option_names": ["--help"]},
    help=f"Run the bundled psql connected to the embedded server (started and migrated if needed). "
    f"Every argument is passed on to psql, e.g. "
    f'pgsched db psql -c "select * from pgsched.queue_stats" (use -- before psql\'s own --help).'
    f"\n\n{_EMBEDDED_NOTE}",
)
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
@handle_errors
@_server_errors
def psql(psql_args: tuple[str, ...]) -> None:
    from pgsched.db.embedded import EmbeddedServer

    target = _start()
    binary = EmbeddedServer().psql_path()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(binary, [binary, f"--dbname={target}", *psql_args])


def register(group: click.Group) -> None:
    group.add_command(db)
