"""The global options (--dsn, --log-level, --log-format) work before and after the subcommand, in process."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pgsched.cli import main
from tests.e2e.clirun import _SCRUBBED, connect, enqueue

CLEAN_ENV: dict[str, str | None] = {name: None for name in _SCRUBBED} | {"PGSCHED_NO_EMBEDDED": "1"}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=CLEAN_ENV, catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "argv",
    [
        ["--dsn", "{dsn}", "jobs", "list", "--json"],
        ["jobs", "list", "--json", "--dsn", "{dsn}"],
        ["jobs", "--dsn", "{dsn}", "list", "--json"],
        ["jobs", "list", "--dsn={dsn}", "--log-level", "warning", "--log-format", "json", "--json"],
        ["dlq", "--dsn", "{dsn}", "--json"],
    ],
)
def test_the_dsn_is_taken_wherever_it_is_given(dsn: str, argv: list[str]) -> None:
    with connect(dsn) as conn:
        job_id = enqueue(conn, "t.global", queue="q-global")

    code, out = invoke(*[a.format(dsn=dsn) for a in argv])

    assert code == 0, out
    rows = json.loads(out)
    if argv[0] != "dlq":
        assert [r["id"] for r in rows] == [job_id]


def test_an_option_after_the_subcommand_wins_over_the_one_before(dsn: str) -> None:
    code, out = invoke("--dsn", "postgresql://nobody@127.0.0.1:1/none", "jobs", "list", "--json", "--dsn", dsn)

    assert code == 0, out
    assert json.loads(out) == []


def test_worker_help_lists_the_global_options() -> None:
    code, out = invoke("worker", "--help")

    assert code == 0
    assert "--dsn" in out


def test_the_worker_takes_the_dsn_after_its_own_options(dsn: str) -> None:
    """The line users type, and the one the worker's own warning suggests."""
    with connect(dsn) as conn:
        job_id = enqueue(conn, "sample.add", {"a": 1, "b": 2}, queue="sample")

    code, out = invoke("worker", "--app", "tests.e2e.sample_app:app", "--queues", "sample", "--burst", "--dsn", dsn)

    assert code == 0, out
    with connect(dsn) as conn:
        row = conn.execute("SELECT state::text AS state FROM pgsched.job_history WHERE id = %s", [job_id]).fetchone()
    assert row == {"state": "completed"}
