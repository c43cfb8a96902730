"""The dashboard's Host allow-list against DNS rebinding: a hostile name that resolves to 127.0.0.1 gets nothing."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from pgsched.dashboard import create_app
from pgsched.dashboard.middleware import host_name
from tests.e2e.clirun import ROOT, command, connect, current, enqueue, environment
from tests.e2e.test_dashboard import Served

Conn = psycopg.Connection[dict[str, Any]]
HOSTILE = "rebind.attacker.example"
SECRET_ARGS = {"card": "4111-1111-1111-1111"}


@pytest.fixture
def serve(dsn: str) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(**options: Any) -> Served:
        served = Served(create_app(dsn, **options)).start()
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


@pytest.fixture
def db(dsn: str) -> Iterator[Conn]:
    with connect(dsn) as conn:
        yield conn


def _attack(http: httpx.Client, job_id: int, host: str) -> list[httpx.Response]:
    """What a page on `host` (resolving to this machine) does: same-origin with itself, so Origin says `host`."""
    same_site = {"Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}
    return [
        http.post(f"/jobs/{job_id}/cancel", headers=same_site),
        http.post(f"/api/jobs/{job_id}/cancel", headers=same_site),
        http.get(f"/api/jobs/{job_id}", headers=same_site),
        http.get(f"/jobs/{job_id}", headers=same_site),
        http.get("/metrics", headers=same_site),
    ]


def test_a_rebound_host_can_neither_cancel_a_job_nor_read_its_args(serve: Callable[..., Served], db: Conn) -> None:
    job_id = enqueue(db, "t.charge", args=SECRET_ARGS)
    served = serve()
    with served.client() as http:
        refused = _attack(http, job_id, f"{HOSTILE}:{served.port}")
        # The same requests by the dashboard's own name go through: the check is the Host, nothing else.
        own = http.get(f"/api/jobs/{job_id}", headers={"Host": f"localhost:{served.port}"})
    for response in refused:
        assert response.status_code == 400, (response.request.url, response.status_code, response.text)
        assert "4111" not in response.text
        assert "t.charge" not in response.text
    assert own.status_code == 200
    assert own.json()["job"]["args"] == SECRET_ARGS
    row = current(db, job_id)
    assert row is not None
    assert (row["tbl"], row["state"]) == ("jobs", "available")  # not cancelled


def test_loopback_names_are_allowed_and_a_configured_name_is_too(
    serve: Callable[..., Served], db: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = enqueue(db, "t.charge", args=SECRET_ARGS)
    monkeypatch.setenv("PGSCHED_DASHBOARD_ALLOWED_HOSTS", "ops.internal, jobs.internal")
    served = serve(allowed_hosts=["dash.example.com"])
    with served.client() as http:
        codes = {
            host: http.get("/api/overview", headers={"Host": host}).status_code
            for host in (
                f"127.0.0.1:{served.port}",
                f"localhost:{served.port}",
                f"[::1]:{served.port}",
                f"LOCALHOST:{served.port}",
                "dash.example.com",
                f"ops.internal:{served.port}",
                "jobs.internal",
                "evil.dash.example.com",
                "dash.example.com.evil",
                "127.0.0.2",
                "",
            )
        }
        cancelled = http.post(
            f"/api/jobs/{job_id}/cancel",
            headers={"Host": "dash.example.com", "Origin": "http://dash.example.com"},
        )
    assert codes == {
        f"127.0.0.1:{served.port}": 200,
        f"localhost:{served.port}": 200,
        f"[::1]:{served.port}": 200,
        f"LOCALHOST:{served.port}": 200,
        "dash.example.com": 200,
        f"ops.internal:{served.port}": 200,
        "jobs.internal": 200,
        "evil.dash.example.com": 400,
        "dash.example.com.evil": 400,
        "127.0.0.2": 400,
        "": 400,
    }
    assert cancelled.status_code == 200
    row = current(db, job_id)
    assert row is not None
    assert row["state"] == "cancelled"  # a waiting job is cancelled at once


def test_star_allows_any_host(serve: Callable[..., Served]) -> None:
    served = serve(allowed_hosts=["*"])
    with served.client() as http:
        assert http.get("/api/overview", headers={"Host": HOSTILE}).status_code == 200


def test_host_name_parsing() -> None:
    assert host_name("Example.COM:8080") == "example.com"
    assert host_name("[::1]:8080") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("example.com.") == "example.com"
    assert host_name("[::1") == ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_pgsched_dashboard_allowed_host_flag_and_env(dsn: str, db: Conn) -> None:
    job_id = enqueue(db, "t.charge", args=SECRET_ARGS)
    port = _free_port()
    proc = subprocess.Popen(
        [*command(), "dashboard", "--port", str(port), "--allowed-host", "jobs.example.org"],
        env=environment({"PGSCHED_DSN": dsn, "PGSCHED_DASHBOARD_ALLOWED_HOSTS": "ops.example.org"}),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, proc.communicate()[1]
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "pgsched dashboard did not answer within 30 s"
                time.sleep(0.1)
            flag = http.get(f"/api/jobs/{job_id}", headers={"Host": f"jobs.example.org:{port}"})
            env = http.get(f"/api/jobs/{job_id}", headers={"Host": "ops.example.org"})
            bind = http.get(f"/api/jobs/{job_id}")  # Host: 127.0.0.1:port, the --host address
            attack = _attack(http, job_id, f"{HOSTILE}:{port}")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert flag.status_code == 200
    assert env.status_code == 200
    assert bind.status_code == 200
    assert [r.status_code for r in attack] == [400] * len(attack)
    assert all("4111" not in r.text for r in attack)
    assert HOSTILE in err  # the refusal is logged once, with how to allow a name
    row = current(db, job_id)
    assert row is not None
    assert (row["tbl"], row["state"]) == ("jobs", "available")
