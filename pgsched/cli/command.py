"""`pgsched enqueue-command`: a command job from the command line, with its resource limits (--memory, --cpus)."""

from __future__ import annotations

import math
import re
from datetime import timedelta

import click

from pgsched.cli.common import duration_callback, emit_json, fail, handle_errors, split_csv, state
from pgsched.core.limits import (
    CPU_LIMIT_MAX,
    CPU_LIMIT_MIN,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MIN,
    MEMORY_LIMIT_MAX,
    MEMORY_LIMIT_MIN,
)

_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNIT_MIB = {"": 1.0, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}


def parse_memory(text: str) -> int:
    """'512M', '1.5G', '64MiB', '2g', '300' (MiB) or '0' (no limit) as whole MiB; ValueError for anything else."""
    found = _MEMORY.match(text)
    if found is None:
        raise ValueError(f"{text!r} is not a memory size: use e.g. 512M, 1.5G, 64MiB (plain numbers are MiB; 0: none)")
    mib = float(found.group(1)) * _UNIT_MIB[found.group(2).lower()]
    if mib != 0 and not MEMORY_LIMIT_MIN <= mib <= MEMORY_LIMIT_MAX:
        raise ValueError(
            f"{text!r} must be 0 (no limit) or {MEMORY_LIMIT_MIN} MiB to {MEMORY_LIMIT_MAX // 1024**2} TiB"
        )
    if mib != int(mib):
        raise ValueError(f"{text!r} is not a whole number of MiB")
    return int(mib)


def memory_callback(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_memory(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def cpus_callback(_ctx: click.Context, _param: click.Parameter, value: float | None) -> float | None:
    if value is not None and value != 0 and not (math.isfinite(value) and CPU_LIMIT_MIN <= value <= CPU_LIMIT_MAX):
        raise click.BadParameter(f"{value!r} must be 0 (no limit) or {CPU_LIMIT_MIN:g} to {CPU_LIMIT_MAX:g} CPUs")
    return value


MEMORY_HELP = "Memory limit of each run: 512M, 1.5G, 64MiB (plain numbers are MiB), 0 for none."
CPUS_HELP = "CPU limit of each run, in CPUs (1.5: one and a half), 0 for none."


@click.command("enqueue-command", context_settings={"ignore_unknown_options": True})
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="A variable of the program (repeatable).")
@click.option("--cwd", default=None, help="Absolute working directory.  [default: the worker user's home]")
@click.option("--timeout", callback=duration_callback, metavar="DURATION", help="Kill the program after this: 90s, 1h.")
@click.option("--queue", "-q", default=None, help="Queue of the job.  [default: commands]")
@click.option("--delay", callback=duration_callback, metavar="DURATION", help="Run no sooner than this from now.")
@click.option("--idempotency-key", default=None, help="Enqueue at most once per key.")
@click.option(
    "--max-attempts",
    type=click.IntRange(MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX),
    default=None,
    help="Runs before it is dead.",
)
@click.option("--labels", default=None, help="Comma-separated labels a worker must offer besides pgsched:command.")
@click.option("--tenant", default=None, help="Tenant the job belongs to.")
@click.option(
    "--memory",
    callback=memory_callback,
    default=None,
    metavar="SIZE",
    help=MEMORY_HELP + "  [default: config.command_memory_limit, 512M]",
)
@click.option(
    "--cpus",
    type=float,
    callback=cpus_callback,
    default=None,
    help=CPUS_HELP + "  [default: config.command_cpu_limit, 1]",
)
@click.option("--json", "as_json", is_flag=True, help="Print {id} as JSON.")
@click.pass_context
@handle_errors
def enqueue_command(
    ctx: click.Context,
    argv: tuple[str, ...],
    env: tuple[str, ...],
    cwd: str | None,
    timeout: timedelta | None,
    queue: str | None,
    delay: timedelta | None,
    idempotency_key: str | None,
    max_attempts: int | None,
    labels: str | None,
    tenant: str | None,
    memory: int | None,
    cpus: float | None,
    as_json: bool,
) -> None:
    """Enqueue a command job: run ARGV (no shell) on a worker started with --commands (needs pgsched_command).

    Put the options before ARGV, or end them with --. Prints the job id.

    \b
    Examples:
      pgsched enqueue-command --timeout 1h --memory 512M --cpus 1.5 -- pg_dump -Fc -f /backups/db.dump db
      pgsched enqueue-command --env MODE=full sh -c 'make report'
    """
    from pgsched.api.app import App

    variables: dict[str, str] = {}
    for item in env:
        name, sep, value = item.partition("=")
        if not sep:
            fail(f"--env {item!r}: expected NAME=VALUE")
        variables[name] = value
    app = App(state(ctx).resolve())
    try:
        handle = app.enqueue_command(
            list(argv),
            env=variables,
            cwd=cwd,
            timeout=timeout,
            queue=queue,
            max_attempts=max_attempts,
            delay=delay,
            idempotency_key=idempotency_key,
            labels=split_csv(labels),
            tenant=tenant,
            memory_limit=memory,
            cpu_limit=cpus,
        )
    except (ValueError, TypeError) as exc:
        fail(str(exc))
    finally:
        app.close()
    if as_json:
        emit_json({"id": int(handle)})
    else:
        click.echo(int(handle))


def register(group: click.Group) -> None:
    group.add_command(enqueue_command)
