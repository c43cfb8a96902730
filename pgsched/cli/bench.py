"""`pgsched bench`: run the side-by-side benchmark of a source checkout (bench/run.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click


def _runner() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "bench" / "run.py"
        if candidate.is_file():
            return candidate
    return None


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """Benchmark pgsched beside Procrastinate, PgQueuer, Chancy and a raw-SQL ceiling.

    \b
    Runs bench/run.py of the source checkout this pgsched comes from; it sets
    up its own PostgreSQL and virtualenv. Arguments go to it unchanged, e.g.:
      pgsched bench --quick
      pgsched bench --only drain,latency --rounds 5
      pgsched bench -- --help
    """
    runner = _runner()
    if runner is None:
        click.echo("error: pgsched bench needs a source checkout of pgsched (bench/run.py was not found)", err=True)
        sys.exit(1)
    completed = subprocess.run([sys.executable, str(runner), *args], cwd=runner.parent.parent, env=os.environ.copy())
    sys.exit(completed.returncode)


def register(group: click.Group) -> None:
    group.add_command(bench)
