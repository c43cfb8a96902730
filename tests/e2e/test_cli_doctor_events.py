"""`pgsched doctor` shows when the event stream (read_events) is held back, and by which session."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from pgsched.cli import main
from tests.e2e.clirun import _SCRUBBED, connect, make_completed


def doctor(dsn: str, *args: str) -> dict[str, Any]:
    env: dict[str, str | None] = {name: None for name in _SCRUBBED} | {"PGSCHED_DSN": dsn, "PGSCHED_NO_EMBEDDED": "1"}
    result = CliRunner().invoke(main, ["doctor", "--json", *args], env=env, catch_exceptions=False)
    # stdout only: a log line on stderr (a timestamp first) is not part of the JSON
    checks = {c["check"]: c for c in json.loads(result.stdout)}
    assert "event stream" in checks, (result.stdout, result.stderr)
    return checks["event stream"]  # type: ignore[no-any-return]


def test_a_transaction_held_open_shows_as_the_event_streams_holder(dsn: str) -> None:
    with connect(dsn) as holder, connect(dsn) as conn:
        pid = holder.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]  # type: ignore[index]
        holder.execute("BEGIN")
        holder.execute("SELECT pg_current_xact_id()")  # any login can take a transaction id and sit on it
        job_id = make_completed(conn, "q-held")
        assert conn.execute("SELECT * FROM pgsched.read_events(0)").fetchall() == [], "held back, as documented"

        held = doctor(dsn, "--max-xact-age", "0")
        assert held["status"] == "fail", held
        assert f"pid {pid}" in held["detail"]
        assert "1 event" in held["detail"]
        assert held["data"]["pid"] == pid

        holder.execute("COMMIT")
        after = conn.execute("SELECT id FROM pgsched.read_events(0)").fetchall()
        assert [r["id"] for r in after] == [job_id]
        assert doctor(dsn, "--max-xact-age", "0")["status"] == "ok"
