"""`pgsched enqueue-command --memory 512M --cpus 1.5 -- ARGV` and `pgsched enqueue --service --memory ...`,
in-process with click's CliRunner."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner, Result

from pgsched.cli import main
from pgsched.cli.command import parse_memory
from tests.e2e.clirun import connect


def _cli(dsn: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--dsn", dsn, *args])


def _job(dsn: str, job_id: int) -> dict[str, Any]:
    with connect(dsn) as conn:
        row = conn.execute("SELECT * FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return row


def _count(dsn: str) -> int:
    with connect(dsn) as conn:
        row = conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone()
    assert row is not None
    return int(row["n"])


@pytest.mark.parametrize(
    ("text", "mib"), [("512M", 512), ("1.5G", 1536), ("64MiB", 64), ("2g", 2048), ("300", 300), ("0", 0)]
)
def test_memory_sizes(text: str, mib: int) -> None:
    assert parse_memory(text) == mib


def test_enqueue_command_with_limits(dsn: str) -> None:
    result = _cli(dsn, "enqueue-command", "--timeout", "1h", "--memory", "512M", "--cpus", "1.5", "--",
                  "pg_dump", "-Fc", "db")  # fmt: skip
    assert result.exit_code == 0, result.output
    job = _job(dsn, int(result.output))
    assert job["args"]["argv"] == ["pg_dump", "-Fc", "db"]
    assert (job["args"]["memory_limit"], job["args"]["cpu_limit"]) == (512, 1.5)
    assert job["args"]["timeout_s"] == 3600
    defaults = _cli(dsn, "enqueue-command", "--env", "MODE=full", "sh", "-c", "make report")
    assert defaults.exit_code == 0, defaults.output
    job = _job(dsn, int(defaults.output))
    assert (job["args"]["memory_limit"], job["args"]["cpu_limit"], job["args"]["env"]) == (512, 1.0, {"MODE": "full"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--memory", "12X"], "not a memory size"),
        (["--memory", "2M"], "4 MiB to 4 TiB"),
        (["--memory", "100.5M"], "whole number of MiB"),
        (["--cpus", "-1"], "0.01 to 1024"),
        (["--cpus", "nan"], "0.01 to 1024"),
        (["--env", "NOEQUALS"], "NAME=VALUE"),
    ],
)
def test_bad_limits_are_refused_and_nothing_is_enqueued(dsn: str, options: list[str], message: str) -> None:
    result = _cli(dsn, "enqueue-command", *options, "--", "true")
    assert result.exit_code != 0
    assert message in result.output
    assert _count(dsn) == 0


def test_enqueue_a_service_with_limits(dsn: str) -> None:
    result = _cli(dsn, "enqueue", "ingest.consume", '{"topic": "orders"}', "--service", "--memory", "256M",
                  "--cpus", "0.5")  # fmt: skip
    assert result.exit_code == 0, result.output
    job = _job(dsn, int(result.output))
    assert (job["service"], job["memory_limit"], job["cpu_limit"]) == (True, 256, 0.5)
    plain = _cli(dsn, "enqueue", "t.plain", "--memory", "256M")
    assert plain.exit_code == 2
    assert "--memory and --cpus limit services" in plain.output
