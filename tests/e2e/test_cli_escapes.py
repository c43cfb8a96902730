"""Terminal escape sequences in tenants' values (args, errors, worker names) are shown escaped, never sent raw."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb

from pgsched.cli import main
from tests.e2e.clirun import _SCRUBBED, claim, connect

# Set the window title, clear the screen, ring the bell, a C1 CSI, a right-to-left override.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def invoke(dsn: str, *args: str) -> str:
    env: dict[str, str | None] = {name: None for name in _SCRUBBED} | {"PGSCHED_DSN": dsn, "PGSCHED_NO_EMBEDDED": "1"}
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def hostile_dead(dsn: str) -> int:
    """A dead letter whose args, error and last worker name all carry escape sequences."""
    with connect(dsn) as conn:
        row: Any = conn.execute(
            "SELECT pgsched.enqueue('t.evil', %s, 'q-evil', max_attempts => 1) AS id", [Jsonb({"x": HOSTILE})]
        ).fetchone()
        leased = claim(conn, "q-evil", worker=f"w-{HOSTILE}")
        conn.execute("SELECT pgsched.fail(%s, %s, %s)", [row["id"], leased["lease_token"], f"boom {HOSTILE}\nmore"])
    return int(row["id"])


@pytest.mark.parametrize("argv", [["jobs", "list"], ["jobs", "show", "{id}"], ["dlq"], ["dlq", "list"]])
def test_escape_sequences_are_printed_escaped(dsn: str, hostile_dead: int, argv: list[str]) -> None:
    out = invoke(dsn, *[a.format(id=hostile_dead) for a in argv])

    assert not [c for c in RAW if c in out], repr(out)
    assert "\\x1b" in out, "the escape is shown, as ls and git show it: " + repr(out)
    assert "boom" in out


def test_a_shown_error_keeps_its_lines(dsn: str, hostile_dead: int) -> None:
    out = invoke(dsn, "jobs", "show", str(hostile_dead))

    assert "boom \\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202e\nmore" in out
