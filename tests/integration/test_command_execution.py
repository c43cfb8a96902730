"""Command jobs, part two: progress lines on stdout, resource limits (cgroups or rlimits) and what they record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from pgsched import App
from tests.integration.conftest import wait_for, wait_state
from tests.integration.test_commands import command_worker  # noqa: F401 (fixture)

Conn = psycopg.Connection[dict[str, Any]]


def test_a_command_reports_progress_by_stdout_lines(
    app: App,
    conn: Conn,
    command_worker: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    script = (
        "echo 'PGSCHED_PROGRESS 0.5 halfway there'; echo 'PGSCHED_PROGRESS 7 ignored'; echo plain;"
        f" while [ ! -e {go} ]; do sleep 0.05; done; printf 'PGSCHED_PROGRESS 1'"
        "; printf '\\n'"
    )
    command_worker()
    handle = app.enqueue_command(["sh", "-c", script])
    halfway = wait_for(lambda: handle.progress(), 30, what="the command's progress")
    assert (halfway.fraction, halfway.note) == (0.5, "halfway there")
    go.touch()
    row = wait_state(conn, handle.id, "completed", "dead")
    assert row["state"] == "completed"
    assert "PGSCHED_PROGRESS 0.5 halfway there\n" in row["result"]["stdout"]
    last = handle.progress()
    assert last is not None
    assert (last.fraction, last.note) == (1.0, None)
