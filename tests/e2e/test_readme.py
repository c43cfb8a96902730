"""The README's "From Python" section runs as written: its files are written out and run against a real database
with the worker command it gives."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from tests.e2e.clirun import ROOT, command, environment

README = ROOT / "README.md"


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def python_files(text: str) -> dict[str, str]:
    """Each ```python block, keyed by the path its first line names (``# path/to/file.py``)."""
    files = {}
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        first = block.splitlines()[0]
        assert re.fullmatch(r"# \S+\.py", first), f"a README block does not name its file: {first}"
        files[first[2:].strip()] = block
    return files


def test_the_from_python_section_runs_as_written(dsn: str, tmp_path: Path) -> None:
    text = section("From Python")
    files = python_files(text)
    assert set(files) == {"myapp/tasks.py", "signup.py"}
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    assert "empty\n`myapp/__init__.py`" in text
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (worker_line,) = re.findall(r"`(pgsched worker [^`]+)`", text)
    worker_args = shlex.split(worker_line)[1:]

    env = environment({"PGSCHED_DSN": dsn, "PYTHONPATH": str(tmp_path)})
    worker = subprocess.Popen(
        [*command(), *worker_args, "--poll-interval", "0.2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        signup = subprocess.run(
            [sys.executable, "signup.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert signup.returncode == 0, signup.stdout + signup.stderr
        assert signup.stdout.strip() == "{'rows': 10}"

        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while True:
                welcomed = conn.execute(
                    "SELECT args->>'user_id' FROM pgsched.job_history"
                    " WHERE task = 'myapp.tasks.send_welcome' AND state = 'completed' ORDER BY 1"
                ).fetchall()
                if len(welcomed) == 4 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert [r[0] for r in welcomed] == ["42", "7", "8", "9"]
            nudge = conn.execute(
                "SELECT state, run_at > now() + interval '2 days' FROM pgsched.jobs WHERE idempotency_key = 'nudge:42'"
            ).fetchone()
            assert nudge == ("scheduled", True)
            schedule = conn.execute("SELECT cron, timezone FROM pgsched.schedules").fetchall()
            assert schedule == [("0 2 * * *", "Europe/Berlin")]
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    assert "welcome, user 42" in out


def test_make_dist_builds_the_wheel_the_readme_installs(tmp_path: Path) -> None:
    assert "`make dist`" in section("From Python")
    built = subprocess.run(
        ["make", "dist", f"BIN={Path(sys.executable).parent}", "STAMP=pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (ROOT / "dist").glob("pgsched-*-py3-none-any.whl")
    assert wheel.name in section("From Python")
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"pgsched/_sql/install.sql", "pgsched/_migrations/env.py", "pgsched/testing.py"} <= names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "pgsched = pgsched.testing" in entry_points


def test_the_job_dependencies_section_runs_as_written(dsn: str, tmp_path: Path) -> None:
    text = section("Job dependencies")
    files = python_files(text)
    assert set(files) == {"pipeline.py"}
    (tmp_path / "pipeline.py").write_text(files["pipeline.py"])
    env = environment({"PGSCHED_DSN": dsn, "PYTHONPATH": str(tmp_path)})
    run = subprocess.run(
        [sys.executable, "pipeline.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == ["['available', 'available', 'waiting', 'waiting']", "archive"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        order = conn.execute(
            "SELECT args->>'source', started_at, finished_at FROM pgsched.job_history ORDER BY id"
        ).fetchall()
    assert [r[0] for r in order] == ["a", "b", None, "report", "archive"]
    # Beside the README's own worker (same database): neither takes the other's jobs.
    (worker_line,) = re.findall(r"`(pgsched worker [^`]+)`", section("From Python"))
    served = set(shlex.split(worker_line)[shlex.split(worker_line).index("--queues") + 1].split(","))
    with psycopg.connect(dsn, autocommit=True) as conn:
        queues = {r[0] for r in conn.execute("SELECT queue FROM pgsched.job_history").fetchall()}
    assert queues.isdisjoint(served), f"the pipeline's jobs {queues} would go to the README's worker ({served})"
    assert re.search(r"app\.drain\(queues=\[", files["pipeline.py"]), "its drain leaves other apps' queues alone"
    started = {r[0]: r[1] for r in order}
    finished = {r[0]: r[2] for r in order}
    assert started[None] >= max(finished["a"], finished["b"])
    assert started["report"] >= finished[None]
    assert started["archive"] >= finished["report"]


def test_every_app_the_readme_and_docs_run_is_the_module_the_readme_defines() -> None:
    texts = [README.read_text(), *(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))]
    refs = {ref for text in texts for ref in re.findall(r"--app (myapp\.[\w.]+):app", text)}
    assert refs == {"myapp.tasks"}, "README's tasks module is myapp/tasks.py"
