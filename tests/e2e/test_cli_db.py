"""`pgsched db` end to end: start, inspect, query and stop an embedded server in a home of its own."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.clirun import Result, run

pytestmark = pytest.mark.slow

# db commands must ignore a configured DSN; this one would fail if used.
ELSEWHERE = "postgresql://nobody@127.0.0.1:1/elsewhere?connect_timeout=1"


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh PGSCHED_HOME; whatever happens, its server is stopped and its files removed."""
    path = Path(tempfile.mkdtemp(prefix="pgsched-e2e-db-"))
    try:
        yield path
    finally:
        try:
            run("db", "stop", env={"PGSCHED_HOME": str(path)}, timeout=60)
        finally:
            _stop_in_process(path)
            shutil.rmtree(path, ignore_errors=True)


def _stop_in_process(path: Path) -> None:
    from pgsched.db.embedded import EmbeddedServer

    try:
        EmbeddedServer(path).stop()
    except Exception as exc:  # the server must not outlive the test, but a failure here must not hide the test's
        print(f"stopping the embedded server in {path} failed: {exc}")


def db(home: Path, *args: str) -> Result:
    result = run("db", *args, env={"PGSCHED_HOME": str(home), "PGSCHED_DSN": ELSEWHERE}, timeout=120)
    assert result.code == 0, str(result)
    return result


def test_start_status_dsn_psql_stop(home: Path) -> None:
    """Slow (up to ~40 s on a loaded machine): it initdb-s and starts a real embedded server through the CLI,
    runs psql and the migration in it, and stops it: the CLI's own start-up is what it tests."""
    version = int(os.environ.get("PGSCHED_EMBEDDED_VERSION", "18"))
    before = db(home, "status", "--json").json()
    assert before == {"running": False, "pid": None, "pgdata": str(home / f"pg{version}"), "version": None, "dsn": None}
    assert "running   no" in db(home, "status").out
    refused = run("db", "dsn", "--no-start", env={"PGSCHED_HOME": str(home)})
    assert refused.code == 1
    assert "not running" in refused.err

    dsn = db(home, "start").out.strip()
    assert dsn.startswith("postgresql://")
    assert str(home) in dsn, "the server's socket lives in its home"

    status = db(home, "status", "--json").json()
    assert status["running"] is True
    assert isinstance(status["pid"], int)
    assert (status["version"], status["dsn"]) == (version, dsn)
    assert f"pid {status['pid']}" in db(home, "status").out
    assert db(home, "dsn").out == dsn + "\n"
    assert db(home, "dsn", "--json").json() == {"dsn": dsn}
    assert db(home, "start", "--json").json()["dsn"] == dsn, "a second start reuses the running server"

    installed = db(home, "psql", "-tAc", "select to_regclass('pgsched.jobs') is not null, 40 + 2")
    assert installed.out.strip() == "t|42"

    # With no DSN configured at all, commands use (and have migrated) the same server.
    enqueued = run("enqueue", "t.embedded", '{"n": 1}', env={"PGSCHED_HOME": str(home)})
    assert enqueued.code == 0, str(enqueued)
    found = db(home, "psql", "-tAc", f"select task, args->>'n' from pgsched.jobs where id = {int(enqueued.out)}")
    assert found.out.strip() == "t.embedded|1"

    assert "stopped the embedded server" in db(home, "stop").out
    assert db(home, "status", "--json").json()["running"] is False
    assert db(home, "stop", "--json").json() == {"stopped": False, "pgdata": status["pgdata"]}
