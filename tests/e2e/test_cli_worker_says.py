"""Workers say what they do, and keep secrets: start line, '*', unserved queues, metrics binding, redacted DSNs.

Every test runs the real console script in a subprocess.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.clirun import ROOT, Cli, command, connect, current, enqueue, environment, run

APP = "tests.e2e.sample_app:app"
PASSWORD = "s3cr3t-Pa55"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Proc:
    """A long-running pgsched command; stop() sends SIGTERM and returns (exit code, stderr)."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [*command(), *args],
            env=environment(env),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_http(self, url: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"exited {self.proc.returncode}: {self.proc.communicate()[1]}")
            try:
                response = httpx.get(url, timeout=2)
                if response.status_code == 200:
                    return response.text
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{url} did not answer within {timeout} s"
            time.sleep(0.1)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


def _listen_address(port: int) -> set[str]:
    """The local addresses listening on TCP port, read from /proc/net/tcp{,6} (as the kernel has them)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def _with_password(dsn: str, password: str) -> str:
    """The test DSN with a password added (trust auth ignores it; it only has to stay secret)."""
    return psycopg.conninfo.make_conninfo(dsn, password=password)


# -- metrics binding -------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from /proc/net/tcp")
def test_metrics_port_binds_loopback_unless_an_address_is_given(dsn: str) -> None:
    loopback_port, any_port = _free_port(), _free_port()
    loopback = Proc(
        "worker", "--app", APP, "--queues", "sample", "--metrics-port", str(loopback_port), env={"PGSCHED_DSN": dsn}
    )
    anywhere = Proc(
        "worker", "--app", APP, "--queues", "sample", "--metrics-port", f"0.0.0.0:{any_port}", env={"PGSCHED_DSN": dsn}
    )
    try:
        loopback.wait_http(f"http://127.0.0.1:{loopback_port}/metrics")
        anywhere.wait_http(f"http://127.0.0.1:{any_port}/metrics")
        assert _listen_address(loopback_port) == {"0100007F"}  # 127.0.0.1, little-endian hex
        assert _listen_address(any_port) == {"00000000"}  # 0.0.0.0
    finally:
        _, loopback_err = loopback.stop()
        _, anywhere_err = anywhere.stop()
    assert f"http://127.0.0.1:{loopback_port}/metrics" in loopback_err
    assert f"http://0.0.0.0:{any_port}/metrics" in anywhere_err


def test_a_bad_metrics_address_is_a_usage_error(dsn: str) -> None:
    for bad in ("abc", "host:", ":9100x", "1.2.3.4:70000"):
        result = run("worker", "--app", APP, "--metrics-port", bad, env={"PGSCHED_DSN": dsn})
        assert result.code == 2, str(result)
        assert "--metrics-port" in result.err


# -- pgsched run: the worker's options, '*', both metric sets ------------------------


def test_run_serves_every_queue_with_star_and_takes_the_worker_options(dsn: str) -> None:
    cli = Cli(dsn)
    with connect(dsn) as conn:
        first = enqueue(conn, "sample.add", {"a": 1, "b": 2}, queue="sample")
        other = enqueue(conn, "sample.add", {"a": 2, "b": 2}, queue="elsewhere")
    port = _free_port()
    proc = Proc(
        "run", "--app", APP, "--queues", "*", "--labels", "gpu", "--lease", "12", "--concurrency", "3",
        "--poll-interval", "0.2", "--name", "runner-1", "--metrics-port", f"127.0.0.1:{port}",
        env={"PGSCHED_DSN": dsn},
    )  # fmt: skip
    try:
        proc.wait_http(f"http://127.0.0.1:{port}/metrics")
        _wait_finished(dsn, [first, other])
        # A queue that appears after the worker started is served too.
        with connect(dsn) as conn:
            late = enqueue(conn, "sample.add", {"a": 3, "b": 3}, queue="brand-new")
        _wait_finished(dsn, [late])
        with connect(dsn) as conn:
            worker = conn.execute("SELECT queues, labels, concurrency FROM pgsched.workers_live").fetchall()
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        code, err = proc.stop()
    assert code == 0, err
    assert worker == [{"queues": ["*"], "labels": ["gpu"], "concurrency": 3}]
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"pgsched_jobs_finished", "pgsched_job_duration_seconds", "pgsched_jobs", "pgsched_workers_live"} <= names
    assert "lease=12s" in err
    assert "worker runner-1 started on database" in err
    with connect(dsn) as conn:
        assert [current(conn, i)["result"] for i in (first, other, late)] == [3, 4, 6]  # type: ignore[index]
    assert cli.ok("run", "--help").out.count("--metrics-port [HOST:]PORT") == 1


def _wait_finished(dsn: str, ids: list[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with connect(dsn) as conn:
        while True:
            rows = [current(conn, i) for i in ids]
            if all(r is not None and r["tbl"] == "job_history" for r in rows):
                return
            assert time.monotonic() < deadline, f"jobs {ids} not finished: {rows}"
            time.sleep(0.1)


def test_scanner_metrics_port_serves_the_queue_gauges(dsn: str) -> None:
    with connect(dsn) as conn:
        enqueue(conn, "t.x", queue="reports")
    port = _free_port()
    proc = Proc("scanner", "--metrics-port", str(port), env={"PGSCHED_DSN": dsn})
    try:
        text = proc.wait_http(f"http://127.0.0.1:{port}/metrics")
    finally:
        proc.stop()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("pgsched_jobs", (("queue", "reports"), ("state", "available")))] == 1
    assert samples[("pgsched_database_up", ())] == 1


# -- what a worker says ----------------------------------------------------------------


def test_worker_warns_about_queues_no_live_worker_serves(dsn: str) -> None:
    with connect(dsn) as conn:
        enqueue(conn, "t.x", queue="orphans")
        enqueue(conn, "t.x", queue="orphans")
        enqueue(conn, "t.x", queue="held")
        conn.execute("SELECT pgsched.pause_queue('held')")
    result = Cli(dsn)("worker", "--app", APP, "--queues", "sample", "--burst")
    assert result.code == 0, str(result)
    assert re.search(r"queue 'orphans' has 2 due jobs .* no live worker serves it", result.err), result.err
    assert "'held'" not in result.err  # paused: nobody is meant to serve it
    assert "'sample'" not in result.err


def test_start_line_names_the_database_and_never_the_password(dsn: str) -> None:
    secret_dsn = _with_password(dsn, PASSWORD)
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    result = run("worker", "--app", APP, "--queues", "sample", "--burst", env={"PGSCHED_DSN": secret_dsn})
    assert result.code == 0, str(result)
    line = next(line for line in result.err.splitlines() if "started on" in line)
    assert f"database {params['dbname']} on " in line
    assert str(params.get("host") or "").split(",")[0] in line or "socket" in line
    assert PASSWORD not in result.err + result.out


# -- no password anywhere ------------------------------------------------------------------

MALFORMED = [
    f"postgresql://u:{PASSWORD}%zz@127.0.0.1:1/db",  # psycopg quotes the bad token, password included
    f"postgresql://u:%zz{PASSWORD}@127.0.0.1:1/db",
    f"host=127.0.0.1 port=1 user=u password={PASSWORD} dbname=db connect_timeout=1",
    f"postgresql://u:{PASSWORD}@127.0.0.1:1/db?connect_timeout=1",
]


@pytest.mark.parametrize("bad", MALFORMED)
@pytest.mark.parametrize(
    ("how", "args"),
    [
        ("env", ("worker", "--app", APP, "--burst")),
        ("flag", ("jobs", "list")),
        ("json-logs", ("doctor",)),
        ("env", ("stats",)),
        ("flag", ("migrate",)),
        ("json-logs", ("enqueue", "t.x")),
        ("json-logs", ("scanner",)),
    ],
    ids=lambda a: a if isinstance(a, str) else a[0],
)
def test_a_password_never_reaches_output_or_logs(bad: str, how: str, args: tuple[str, ...]) -> None:
    if how == "env":
        argv, env = args, {"PGSCHED_DSN": bad}
    elif how == "flag":
        argv, env = ("--dsn", bad, *args), {}
    else:
        argv, env = ("--log-format", "json", "--log-level", "debug", *args), {"DATABASE_URL": bad}
    # Workers and scanners retry an unreachable server for ever: read what they say until they report it.
    proc = subprocess.Popen(
        [*command(), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(env),
        cwd=ROOT,
    )
    lines: list[str] = []
    stderr = proc.stderr
    assert stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 90
    while proc.poll() is None and time.monotonic() < deadline:
        if args[0] in ("worker", "scanner") and any("cannot connect" in line for line in list(lines)):
            break  # a retrying process said why: enough to check it
        time.sleep(0.05)
    retrying = proc.poll() is None
    if retrying:
        assert args[0] in ("worker", "scanner"), f"pgsched {args[0]} neither exited nor reported within 90 s"
        proc.terminate()
    out, _ = proc.communicate(timeout=30)
    reader.join(timeout=10)
    err = "".join(lines)
    if not retrying:
        assert proc.returncode != 0, (out, err)
    assert PASSWORD not in out + err, out + err
    assert (out + err).strip(), "the failure is reported"


def test_redaction_keeps_the_error_useful() -> None:
    result = run("jobs", "list", env={"PGSCHED_DSN": MALFORMED[0]})
    assert result.code == 1
    assert 'invalid percent-encoded token: "***"' in result.err, result.err
    assert result.err.startswith("error: ")


def test_dashboard_error_pages_and_logs_hide_the_password(dsn: str) -> None:
    """Slow (~20 s): a real dashboard process whose database refuses it, its pages and logs read over HTTP."""
    bad = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db?connect_timeout=1"
    port = _free_port()
    proc = Proc("dashboard", "--port", str(port), env={"PGSCHED_DSN": bad, "PGSCHED_NO_EMBEDDED": "1"})
    try:
        deadline = time.monotonic() + 60
        bodies: list[str] = []
        while time.monotonic() < deadline and len(bodies) < 2:
            if proc.proc.poll() is not None:
                break
            try:
                bodies = [httpx.get(f"http://127.0.0.1:{port}{path}", timeout=20).text for path in ("/healthz", "/")]
            except httpx.TransportError:
                time.sleep(0.2)
    finally:
        _, err = proc.stop()
    assert PASSWORD not in "".join(bodies) + err


# -- the embedded fallback ----------------------------------------------------------------


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pgsched-e2e-says-"))
    try:
        yield path
    finally:
        try:
            run("db", "stop", env={"PGSCHED_HOME": str(path)}, timeout=60)
        finally:
            shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_worker_outside_a_terminal_warns_loudly_on_the_embedded_fallback(home: Path) -> None:
    result = run("worker", "--app", APP, "--queues", "sample", "--burst", env={"PGSCHED_HOME": str(home)}, timeout=180)
    assert result.code == 0, str(result)
    assert "NO DATABASE CONFIGURED" in result.err
    assert "embedded PostgreSQL" in result.err
    assert "WARNING" in result.err


def test_pausing_an_unknown_queue_is_refused(dsn: str) -> None:
    cli = Cli(dsn)
    with connect(dsn) as conn:
        enqueue(conn, "t.x", queue="mail")
    refused = cli("queues", "pause", "mial")
    assert refused.code == 1
    assert "no queue named 'mial'" in refused.err
    assert "--force" in refused.err
    with connect(dsn) as conn:
        assert conn.execute("SELECT name FROM pgsched.queues").fetchall() == []  # nothing was written
    assert "queue mail paused" in cli.ok("queues", "pause", "mail").out
    assert cli.json("queues", "pause", "later", "--force") == {"queue": "later", "paused": True}
