"""The dashboard served by uvicorn over a real database: pages, JSON, actions, escaping, /metrics, a real browser."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from pgsched.dashboard import create_app
from pgsched.dashboard.html import LIVE_JS_HASH, LIVE_SCRIPT
from tests.e2e.clirun import (
    ROOT,
    claim,
    command,
    connect,
    current,
    enqueue,
    environment,
    make_completed,
    make_dead,
    run,
)
from tests.scheduling.helpers import add_schedule, expand

Conn = psycopg.Connection[dict[str, Any]]

XSS_ARGS = {"html": "<script>alert('pwned')</script>", "attr": '"><img src=x onerror=alert(1)>'}
DEAD_ERROR = "ValueError: <b>bad</b> & worse"


@dataclass
class Seeded:
    """Ids of the jobs seed() made, by role."""

    dead: int
    completed: int
    running: int
    available: int
    scheduled: int
    overdue: int
    xss: int


def seed(conn: Conn) -> Seeded:
    """Queue 'mail': a dead letter, a completed, a running, an available and a scheduled job; 'reports': a job
    due 10 minutes ago; 'xss': a job whose args are markup; schedule 'nightly' expanded by a scanner."""
    dead = make_dead(conn, "mail", DEAD_ERROR, task="mail.send")
    completed = make_completed(conn, "mail", task="mail.send")
    running = enqueue(conn, "mail.send", {"to": "a@example.com"}, queue="mail")
    claim(conn, "mail", worker="w-dashboard")
    available = enqueue(conn, "mail.send", {"to": "b@example.com"}, queue="mail")
    scheduled = enqueue(conn, "mail.send", queue="mail", run_at=datetime.now(UTC) + timedelta(hours=1))
    overdue = enqueue(conn, "reports.build", queue="reports", run_at=datetime.now(UTC) - timedelta(minutes=10))
    xss = enqueue(conn, "t.xss", XSS_ARGS, queue="xss")
    conn.execute("SELECT pgsched.register_worker('w-dashboard', 'host-1', 4242, ARRAY['mail'], '{}', 8, '0.1.0')")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    add_schedule(conn, "nightly", "*/15 * * * *")
    expand(conn, "nightly", now, now + timedelta(hours=1), datetime.now(UTC), scanner="scanner-1")
    return Seeded(dead, completed, running, available, scheduled, overdue, xss)


class Served:
    """The dashboard app under uvicorn in a thread, on a free port of 127.0.0.1."""

    def __init__(self, app: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", ws="none", lifespan="on", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, name="dashboard", daemon=True
        )

    def start(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert self.thread.is_alive(), "the dashboard did not start"
            assert time.monotonic() < deadline, "the dashboard did not start within 15 s"
            time.sleep(0.02)
        return self

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10, **kwargs)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self._socket.close()


@pytest.fixture
def serve(dsn: str) -> Iterator[Callable[..., Served]]:
    """serve(**create_app options) -> a started dashboard on the test database, stopped at teardown."""
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


@pytest.fixture
def seeded(db: Conn) -> Seeded:
    return seed(db)


def by_queue(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["queue"]: row for row in rows}


# -- pages and JSON ------------------------------------------------------------


def test_overview_shows_queues_workers_scanners_and_shard_owners(serve: Callable[..., Served], seeded: Seeded) -> None:
    with serve().client() as http:
        page = http.get("/")
        api = http.get("/api/overview").json()
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    # default-src 'none': no script but the dashboard's own live-update one, named by its hash.
    policy = dict(part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";"))
    assert policy["script-src"] == f"'{LIVE_JS_HASH}'"
    assert policy["connect-src"] == "'self'"
    assert page.text.count("<script") == 1
    html = page.text
    for text in ("<h2>Queues</h2>", 'href="/queues/mail"', 'href="/queues/reports"', "w-dashboard", "scanner-1"):
        assert text in html
    queues = by_queue(api["queues"])
    mail = queues["mail"]
    assert (mail["scheduled"], mail["available"], mail["running"], mail["dead_letters"]) == (1, 1, 1, 1)
    assert (mail["completed_5m"], mail["dead_5m"]) == (1, 1)
    assert mail["lag_p50_s"] is not None
    assert queues["reports"]["oldest_due_age_s"] >= 590
    assert queues["reports"]["lag_p50_s"] is None  # nothing finished there: no percentile, not 0
    assert [w["name"] for w in api["workers"]] == ["w-dashboard"]
    assert [s["name"] for s in api["scanners"]] == ["scanner-1"]
    assert {s["owner"] for s in api["shard_leases"]} == {"scanner-1"}
    assert api["workers_live"] == 1


def test_queue_page_filters_by_state_and_pages(serve: Callable[..., Served], seeded: Seeded, db: Conn) -> None:
    with serve().client() as http:
        everything = http.get("/api/queues/mail").json()
        running = http.get("/api/queues/mail", params={"state": "running"}).json()
        first = http.get("/api/queues/mail", params={"limit": 2}).json()
        second = http.get("/api/queues/mail", params={"limit": 2, "before": first["next_before"]}).json()
        page = http.get("/queues/mail", params={"state": "dead"})
        bad_state = http.get("/queues/mail", params={"state": "lost"})
        bad_before = http.get("/api/queues/mail", params={"before": "x"})
    ids = [j["id"] for j in everything["jobs"]]
    assert ids == sorted([seeded.dead, seeded.completed, seeded.running, seeded.available, seeded.scheduled])[::-1]
    assert [j["id"] for j in running["jobs"]] == [seeded.running]
    assert running["jobs"][0]["worker"] == "w-dashboard"
    assert [j["id"] for j in first["jobs"] + second["jobs"]] == ids[:4]
    assert everything["next_before"] is None
    assert page.status_code == 200
    assert f'href="/jobs/{seeded.dead}"' in page.text
    assert f'href="/jobs/{seeded.available}"' not in page.text
    assert "ValueError: &lt;b&gt;bad&lt;/b&gt; &amp; worse" in page.text
    assert (bad_state.status_code, bad_before.status_code) == (400, 400)
    assert bad_before.json() == {"error": "before must be a whole number"}


def test_job_page_has_the_row_timeline_and_error(serve: Callable[..., Served], seeded: Seeded) -> None:
    with serve().client() as http:
        dead = http.get(f"/jobs/{seeded.dead}")
        api = http.get(f"/api/jobs/{seeded.dead}").json()
        running = http.get(f"/api/jobs/{seeded.running}").json()
        missing = http.get("/jobs/987654321")
        missing_api = http.get("/api/jobs/987654321")
    assert dead.status_code == 200
    assert "&lt;b&gt;bad&lt;/b&gt;" in dead.text
    assert "<b>bad</b>" not in dead.text
    assert api["job"]["state"] == "dead"
    assert api["job"]["table"] == "job_history"
    assert api["job"]["error"] == DEAD_ERROR
    assert [e["kind"] for e in api["events"]] == ["claimed", "dead"]
    assert [h["state"] for h in api["history"]] == ["dead"]
    assert running["job"]["state"] == "running"
    assert running["job"]["worker"] == "w-dashboard"
    assert running["job"]["args"] == {"to": "a@example.com"}
    assert missing.status_code == 404
    assert "Not found" in missing.text
    assert missing_api.status_code == 404


def test_user_data_is_escaped_everywhere(serve: Callable[..., Served], seeded: Seeded) -> None:
    with serve().client() as http:
        pages = [http.get(f"/jobs/{seeded.xss}"), http.get("/queues/xss"), http.get("/"), http.get("/dead")]
        api = http.get(f"/api/jobs/{seeded.xss}").json()
        flash = http.get("/", params={"msg": "<script>alert(1)</script>"})
    for page in pages:
        assert page.status_code == 200
        assert "<script" not in page.text.replace(LIVE_SCRIPT, "").lower()  # only the dashboard's own
        assert "<img" not in page.text.lower()
    job_page, queue_page = pages[0].text, pages[1].text
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in job_page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in job_page
    assert "&lt;script&gt;" in queue_page
    assert api["job"]["args"] == XSS_ARGS  # the API returns the data itself, as JSON
    assert "alert(1)" not in flash.text  # a forged flash message is not shown at all


def test_dead_letters_and_schedules_pages(serve: Callable[..., Served], seeded: Seeded) -> None:
    with serve().client() as http:
        dead = http.get("/dead")
        dead_api = http.get("/api/dead", params={"queue": "mail"}).json()
        other_queue = http.get("/api/dead", params={"queue": "reports"}).json()
        schedules = http.get("/schedules")
        schedules_api = http.get("/api/schedules", params={"schedule": "nightly"}).json()
    assert dead.status_code == 200
    assert f'action="/jobs/{seeded.dead}/retry"' in dead.text
    assert [d["id"] for d in dead_api["dead_letters"]] == [seeded.dead]
    assert dead_api["counts"] == [{"queue": "mail", "n": 1}]
    assert other_queue["dead_letters"] == []
    assert schedules.status_code == 200
    assert "nightly" in schedules.text
    assert "*/15 * * * *" in schedules.text
    assert [s["name"] for s in schedules_api["schedules"]] == ["nightly"]
    decisions = schedules_api["occurrences"]
    assert len(decisions) == 4
    assert {o["decision"] for o in decisions} == {"fire"}
    assert all(o["job_id"] is not None for o in decisions)


# -- actions -------------------------------------------------------------------


def test_actions_change_the_database(serve: Callable[..., Served], seeded: Seeded, db: Conn) -> None:
    with serve().client() as http:
        cancel = http.post(f"/jobs/{seeded.available}/cancel", data={"next": "/queues/mail?state=available"})
        assert cancel.status_code == 303
        assert cancel.headers["location"].startswith("/queues/mail?state=available&msg=")
        shown = http.get(cancel.headers["location"])
        assert f"cancel job {seeded.available}: cancelled" in shown.text
        assert current(db, seeded.available)["state"] == "cancelled"  # type: ignore[index]

        retry = http.post(f"/jobs/{seeded.dead}/retry", data={"next": "/dead"})
        assert retry.status_code == 303
        row = current(db, seeded.dead)
        assert row is not None
        assert (row["tbl"], row["state"]) == ("jobs", "available")

        assert http.post("/queues/mail/pause", data={"next": "/"}).status_code == 303
        assert db.execute("SELECT paused FROM pgsched.queues WHERE name = 'mail'").fetchone() == {"paused": True}
        assert by_queue(http.get("/api/overview").json()["queues"])["mail"]["paused"] is True
        assert http.post("/api/queues/mail/resume").json() == {
            "action": "resume_queue",
            "target": "mail",
            "result": "resumed",
        }
        assert db.execute("SELECT paused FROM pgsched.queues WHERE name = 'mail'").fetchone() == {"paused": False}

        assert http.post("/schedules/nightly/pause", data={"next": "/schedules"}).status_code == 303
        assert db.execute("SELECT enabled FROM pgsched.schedules").fetchone() == {"enabled": False}
        assert http.post("/api/schedules/nightly/resume").json()["result"] == "resumed"
        assert db.execute("SELECT enabled FROM pgsched.schedules").fetchone() == {"enabled": True}

        running = http.post(f"/api/jobs/{seeded.running}/cancel").json()
        assert running["result"] == "cancel_requested"
        offsite = http.post(f"/jobs/{seeded.scheduled}/cancel", data={"next": "https://evil.example/"})
        assert offsite.headers["location"].startswith("/?msg=")  # never redirected off the dashboard
        assert http.get(f"/jobs/{seeded.scheduled}/cancel").status_code == 405


def test_cross_site_posts_are_refused(serve: Callable[..., Served], seeded: Seeded, db: Conn) -> None:
    with serve().client() as http:
        forged = http.post(f"/jobs/{seeded.available}/cancel", headers={"Origin": "https://evil.example"})
        fetched = http.post(f"/jobs/{seeded.available}/cancel", headers={"Sec-Fetch-Site": "cross-site"})
        same = http.post(
            f"/api/jobs/{seeded.available}/cancel",
            headers={"Origin": http.base_url.scheme + "://" + http.base_url.netloc.decode()},
        )
    assert (forged.status_code, fetched.status_code) == (403, 403)
    assert same.status_code == 200


def test_read_only_refuses_actions(serve: Callable[..., Served], seeded: Seeded, db: Conn) -> None:
    with serve(read_only=True).client() as http:
        pages = [http.get("/"), http.get(f"/jobs/{seeded.available}"), http.get("/dead"), http.get("/schedules")]
        refused = [
            http.post(f"/jobs/{seeded.available}/cancel", data={"next": "/"}),
            http.post(f"/api/jobs/{seeded.dead}/retry"),
            http.post("/queues/mail/pause"),
            http.post("/api/schedules/nightly/pause"),
        ]
    for page in pages:
        assert page.status_code == 200
        assert "<form" not in page.text
        assert "read-only" in page.text
    assert [r.status_code for r in refused] == [403, 403, 403, 403]
    assert "read-only" in refused[0].text
    assert refused[1].json() == {"error": "This dashboard is read-only."}
    assert current(db, seeded.available)["state"] == "available"  # type: ignore[index]
    assert current(db, seeded.dead)["state"] == "dead"  # type: ignore[index]
    assert db.execute("SELECT count(*) AS n FROM pgsched.queues WHERE paused").fetchone() == {"n": 0}
    assert db.execute("SELECT enabled FROM pgsched.schedules").fetchone() == {"enabled": True}


def test_basic_auth_when_configured(
    serve: Callable[..., Served], seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGSCHED_DASHBOARD_USER", "ops")
    monkeypatch.setenv("PGSCHED_DASHBOARD_PASSWORD", "s3cret:with:colons")
    served = serve()
    with served.client() as anonymous:
        denied = anonymous.get("/")
        denied_api = anonymous.post(f"/api/jobs/{seeded.available}/cancel")
        health = anonymous.get("/healthz")
    with served.client(auth=("ops", "wrong")) as wrong:
        wrong_password = wrong.get("/metrics")
    with served.client(auth=("ops", "s3cret:with:colons")) as ops:
        allowed = ops.get("/")
        metrics = ops.get("/metrics")
    assert denied.status_code == 401
    assert denied.headers["www-authenticate"].startswith("Basic")
    assert (denied_api.status_code, wrong_password.status_code) == (401, 401)
    assert health.status_code == 200
    assert (allowed.status_code, metrics.status_code) == (200, 200)


def test_database_down_answers_503_and_metrics_say_so() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    served = Served(create_app(f"postgresql://nobody@127.0.0.1:{port}/none?connect_timeout=1", db_timeout=0.5))
    with served.start().client() as http:
        page = http.get("/")
        api = http.get("/api/overview")
        health = http.get("/healthz")
        metrics = http.get("/metrics")
    served.stop()
    assert page.status_code == 503
    assert "Database unavailable" in page.text
    assert api.status_code == 503
    assert "could not be read" in api.json()["error"]
    assert health.status_code == 503
    assert metrics.status_code == 200
    assert samples(metrics.text) == {("pgsched_database_up", frozenset()): 0.0}


# -- /metrics ------------------------------------------------------------------


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus exposition, by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def test_metrics_per_queue(serve: Callable[..., Served], seeded: Seeded, db: Conn) -> None:
    db.execute("SELECT pgsched.pause_queue('reports')")
    with serve().client() as http:
        response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    found = samples(response.text)
    assert value(found, "pgsched_database_up") == 1
    for state, n in {"scheduled": 1, "available": 1, "running": 1}.items():
        assert value(found, "pgsched_jobs", queue="mail", state=state) == n
    assert value(found, "pgsched_jobs", queue="reports", state="available") == 1
    assert value(found, "pgsched_oldest_due_age_seconds", queue="reports") >= 590
    assert value(found, "pgsched_oldest_due_age_seconds", queue="mail") < 60
    assert value(found, "pgsched_dead_letters", queue="mail") == 1
    assert value(found, "pgsched_dead_letters", queue="reports") == 0
    assert value(found, "pgsched_queue_paused", queue="reports") == 1
    assert value(found, "pgsched_queue_paused", queue="mail") == 0
    assert value(found, "pgsched_retrying_jobs", queue="mail") == 0
    assert value(found, "pgsched_expired_leases", queue="mail") == 0
    assert value(found, "pgsched_workers_live") == 1
    # Windows and quantiles belong to PromQL: finished counts and lag histograms come from workers.
    assert not [name for name, labels in found if name.endswith("_5m") or "quantile" in dict(labels)]


def test_expired_leases_and_retries_show_in_metrics(serve: Callable[..., Served], db: Conn) -> None:
    job_id = enqueue(db, "t.slow", queue="slow")
    claim(db, "slow", lease="1 second")
    retried = enqueue(db, "t.flaky", queue="flaky", max_attempts=3)
    leased = claim(db, "flaky")
    db.execute("SELECT pgsched.fail(%s, %s, 'oops')", [retried, leased["lease_token"]])
    time.sleep(1.1)
    with serve().client() as http:
        found = samples(http.get("/metrics").text)
    assert value(found, "pgsched_expired_leases", queue="slow") == 1
    assert value(found, "pgsched_retrying_jobs", queue="flaky") == 1
    assert current(db, job_id)["state"] == "running"  # type: ignore[index]


# -- the command -----------------------------------------------------------------


def test_help_of_dashboard_and_worker_metrics_port() -> None:
    dashboard = run("dashboard", "--help")
    worker = run("worker", "--help")
    assert dashboard.code == 0, str(dashboard)
    for phrase in ("--host", "--port", "--read-only", "PGSCHED_DASHBOARD_USER", "/metrics", "/jobs (search)", "bulk"):
        assert phrase in dashboard.out
    assert "--metrics-port [HOST:]PORT" in worker.out


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_pgsched_dashboard_command_serves_read_only(dsn: str, seeded: Seeded) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [*command(), "dashboard", "--port", str(port), "--read-only"],
        env=environment({"PGSCHED_DSN": dsn}),
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
            overview = http.get("/api/overview")
            refused = http.post(f"/api/jobs/{seeded.available}/cancel")
            metrics = http.get("/metrics")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert overview.status_code == 200
    assert by_queue(overview.json()["queues"])["mail"]["available"] == 1
    assert refused.status_code == 403
    assert "pgsched_jobs{" in metrics.text
    assert "(read-only)" in err


# -- a real browser ------------------------------------------------------------

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def _install_chromium() -> str:
    """Debian's chromium: found on PATH, else installed with apt-get when running as root."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("PGSCHED_TEST_NO_BROWSER_INSTALL"):
        pytest.skip("chromium is not installed and PGSCHED_TEST_NO_BROWSER_INSTALL is set")
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed (apt-get install chromium, as root, to run the browser test)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=600, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"installing chromium failed ({' '.join(step)}): {exc}")
        if done.returncode != 0:
            pytest.skip(f"installing chromium failed ({' '.join(step)}): {done.stderr.strip()[-300:]}")
    found = shutil.which("chromium")
    if not found:
        pytest.skip("apt-get installed chromium but no chromium binary is on PATH")
    return found


@pytest.fixture(scope="session")
def chromium() -> str:
    return _install_chromium()


def browse(chromium: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="pgsched-chromium-") as profile:
        return subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
            capture_output=True,
            text=True,
            timeout=90,
        )


@pytest.mark.slow
def test_pages_render_in_a_headless_browser(
    serve: Callable[..., Served], seeded: Seeded, chromium: str, tmp_path: Path
) -> None:
    served = serve()
    # Console messages go to stderr, so a blocked stylesheet (CSP) would show there.
    overview = browse(chromium, served.url + "/", "--dump-dom", "--enable-logging=stderr", "--v=1")
    assert overview.returncode == 0, overview.stderr[-2000:]
    dom = overview.stdout
    assert "<table>" in dom
    assert "<h2>Queues</h2>" in dom
    assert 'href="/queues/mail"' in dom
    assert 'href="/queues/reports"' in dom
    assert "violates the following Content Security Policy" not in overview.stderr

    job = browse(chromium, f"{served.url}/jobs/{seeded.xss}", "--dump-dom")
    assert job.returncode == 0, job.stderr[-2000:]
    assert "<h2>Timeline</h2>" in job.stdout
    assert "&lt;script&gt;alert('pwned')&lt;/script&gt;" in job.stdout  # shown as text, never run
    assert "<script" not in job.stdout

    # Screenshots to look at: all pages into $PGSCHED_SCREENSHOT_DIR when set, else two into tmp_path.
    keep = os.environ.get("PGSCHED_SCREENSHOT_DIR")
    shots = Path(keep or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    views = {"overview": "/", "job": f"/jobs/{seeded.dead}"}
    if keep:
        views.update({"queue": "/queues/mail", "dead": "/dead", "schedules": "/schedules"})
    for name, path in views.items():
        target = shots / f"dashboard-{name}.png"
        shot = browse(chromium, served.url + path, f"--screenshot={target}", "--window-size=1440,1000")
        assert shot.returncode == 0, shot.stderr[-2000:]
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert target.stat().st_size > 10_000  # a rendered page, not a blank image
