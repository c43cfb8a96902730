"""The dashboard for operators: charts over time with live updates, job search, bulk actions, in a real browser."""

from __future__ import annotations

import os
import re
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from tests.e2e.browser import Browser
from tests.e2e.clirun import claim, current, enqueue, make_dead
from tests.e2e.test_dashboard import Conn, Seeded, Served, chromium, db, seeded, serve  # noqa: F401 (fixtures)
from tests.scheduling.helpers import add_schedule

HIST = "billing"


def put(
    conn: Conn,
    task: str,
    args: dict[str, Any] | None = None,
    *,
    queue: str = "default",
    run_at: datetime | None = None,
    tenant: str | None = None,
    priority: int = 0,
) -> int:
    row = conn.execute(
        "SELECT pgsched.enqueue(%s, %s, %s, coalesce(%s, now()), %s, tenant => %s) AS id",
        [task, Jsonb(args or {}), queue, run_at, priority, tenant],
    ).fetchone()
    assert row is not None
    return int(row["id"])


def db_now(conn: Conn) -> datetime:
    row = conn.execute("SELECT now() AS now").fetchone()
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]


def seed_history(conn: Conn, minutes: int = 55) -> dict[str, int]:
    """55 minutes of work in queue "billing", minute by minute through p_now, rolled up as a scanner would:
    1 to 5 completed jobs a minute, a failure that retries every 7th minute, a dead letter every 13th, and a
    backlog growing by one job a minute. Returns the totals."""
    now = db_now(conn)
    totals = {"completed": 0, "failed": 0, "dead": 0}
    for k in range(minutes, 0, -1):
        at = (now - timedelta(minutes=k)).replace(second=5, microsecond=0)
        for i in range(1 + (minutes - k) % 5):
            job_id = put(
                conn, "bill.charge", {"n": i}, queue=HIST, run_at=at - timedelta(seconds=1 + k % 9), priority=1
            )
            leased = conn.execute(
                "SELECT * FROM pgsched.claim('w-hist', ARRAY[%s], 1, '1 minute', p_now => %s)", [HIST, at]
            ).fetchone()
            assert leased is not None
            assert leased["id"] == job_id
            end = at + timedelta(seconds=2 + i)
            if k % 7 == 0 and i == 0:
                conn.execute(
                    "SELECT pgsched.fail(%s, %s, 'flaky', %s, p_now => %s)", [job_id, leased["lease_token"], end, end]
                )
                totals["failed"] += 1
                leased = conn.execute(
                    "SELECT * FROM pgsched.claim('w-hist', ARRAY[%s], 1, '1 minute', p_now => %s)",
                    [HIST, end + timedelta(seconds=1)],
                ).fetchone()
                assert leased is not None
            if k % 13 == 0 and i == 0:
                conn.execute(
                    "SELECT pgsched.fail(%s, %s, 'broken', final => true, p_now => %s)",
                    [leased["id"], leased["lease_token"], end + timedelta(seconds=2)],
                )
                totals["dead"] += 1
                continue
            conn.execute(
                "SELECT * FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], p_now => %s)",
                [leased["id"], leased["lease_token"], end + timedelta(seconds=2)],
            )
            totals["completed"] += 1
        enqueue(conn, "bill.later", queue=HIST, run_at=at)  # the backlog: due, never claimed
        conn.execute("SELECT pgsched.rollup_queue_history(p_now => %s)", [at + timedelta(seconds=50)])
    conn.execute("SELECT pgsched.rollup_queue_history(p_since => %s)", [now - timedelta(hours=2)])
    return totals


@pytest.fixture
def history(db: Conn) -> dict[str, int]:  # noqa: F811
    return seed_history(db)


def artifacts() -> Path:
    """Where screenshots go: $PGSCHED_SCREENSHOT_DIR, else tmp/artifacts/dashboard under the repository."""
    where = Path(
        os.environ.get("PGSCHED_SCREENSHOT_DIR") or Path(__file__).resolve().parents[2] / "tmp/artifacts/dashboard"
    )
    where.mkdir(parents=True, exist_ok=True)
    return where


# -- charts ----------------------------------------------------------------------


def test_charts_on_the_overview_and_queue_pages(serve: Callable[..., Served], history: dict[str, int]) -> None:  # noqa: F811
    with serve().client() as http:
        overview = http.get("/")
        queue = http.get(f"/queues/{HIST}")
        day = http.get(f"/queues/{HIST}", params={"window": "1d"})
        api = http.get("/api/history", params={"queue": HIST}).json()
        other = http.get("/api/history", params={"queue": "nothing-here"}).json()
        fragment = http.get("/fragments/charts", params={"queue": HIST, "window": "1h"})
        bad = http.get("/api/history", params={"window": "1y"})
    for page in (overview, queue, day):
        assert page.status_code == 200
        charts = re.findall(r'<figure class="chart" data-chart="([a-z]+)"', page.text)
        assert charts == ["throughput", "failures", "lag", "depth"]
        assert page.text.count("<polyline") >= 4
        assert '<div id="live" data-src="/fragments/charts?' in page.text
    assert 'data-src="/fragments/charts?queue=billing&amp;window=1h"' in queue.text
    assert 'data-src="/fragments/charts?queue=billing&amp;window=1d"' in day.text
    assert "last day" in day.text
    points = api["points"]
    assert sum(p["completed"] for p in points) == history["completed"]
    assert sum(p["failed"] for p in points) == history["failed"]
    assert sum(p["dead"] for p in points) == history["dead"]
    assert max(p["available"] or 0 for p in points) >= 54  # the backlog grew by one a minute
    assert all(p["lag_p95_s"] is None or 0 < p["lag_p95_s"] < 10 for p in points)
    assert other["points"] == []
    assert fragment.status_code == 200
    assert fragment.text.startswith('<div class="charts"')
    assert "<html" not in fragment.text
    assert bad.status_code == 400


# -- search ----------------------------------------------------------------------


@pytest.fixture
def jobs(db: Conn, seeded: Seeded) -> dict[str, int]:  # noqa: F811
    """Beside seed(): jobs of tenants, with args to search in, in two more queues."""
    made = {
        "acme": put(db, "mail.send", {"to": "ops@acme.example", "tags": ["vip"]}, queue="outbox", tenant="acme"),
        "globex": put(db, "mail.digest", {"to": "x@globex.example"}, queue="outbox", tenant="globex"),
        "report": put(db, "reports.build", {"month": 11}, queue="reports"),
    }
    return made


def ids(response: Any) -> list[int]:
    assert response.status_code == 200, response.text
    return [j["id"] for j in response.json()["jobs"]]


def test_search_across_queues_by_every_filter(
    serve: Callable[..., Served],  # noqa: F811
    seeded: Seeded,  # noqa: F811
    jobs: dict[str, int],
) -> None:
    with serve().client() as http:
        get = lambda **params: http.get("/api/jobs", params=params)  # noqa: E731
        mail_send = ids(get(task="mail.send"))
        assert mail_send == sorted(
            [seeded.dead, seeded.completed, seeded.running, seeded.available, seeded.scheduled, jobs["acme"]],
            reverse=True,
        )
        assert ids(get(task="mail.*")) == sorted([*mail_send, jobs["globex"]], reverse=True)
        assert ids(get(state="dead")) == [seeded.dead]
        assert ids(get(state="running,scheduled", task="mail.send")) == [seeded.scheduled, seeded.running]
        assert ids(get(queue="outbox")) == [jobs["globex"], jobs["acme"]]
        assert ids(get(tenant="acme")) == [jobs["acme"]]
        assert ids(get(args='{"tags": ["vip"]}')) == [jobs["acme"]]
        assert ids(get(args='{"to": "b@example.com"}')) == [seeded.available]
        assert ids(get(task="reports.build", since="1h")) == [jobs["report"], seeded.overdue]
        assert ids(get(task="reports.build", since="5m", time="due")) == [jobs["report"]]  # the other was due 10m ago
        assert ids(get(task="reports.build", until="2000-01-01T00:00")) == []
        assert ids(get(state="dead", time="finished", since="5m")) == [seeded.dead]
        assert ids(get(time="finished", since="5m", queue="outbox")) == []  # active jobs have not finished

        everything = ids(get())
        first = get(limit=3).json()
        second = get(limit=3, before=first["next_before"]).json()
        assert [j["id"] for j in first["jobs"] + second["jobs"]] == everything[:6]
        assert first["next_before"] == everything[2]

        for params, message in (
            ({"state": "lost"}, "state must be one of"),
            ({"args": "[1, 2]"}, "args must be a JSON object"),
            ({"args": "{not json"}, "args must be a JSON object"),
            ({"since": "yesterday"}, "since must be a time"),
            ({"time": "never"}, "time must be one of"),
            ({"task": "mail\x00send"}, "cannot use"),  # a value the database cannot take: the request is wrong
            ({"tenant": "a\x00"}, "cannot use"),
        ):
            refused = get(**params)
            assert refused.status_code == 400, params
            assert message in refused.json()["error"]
        assert http.get("/api/dead", params={"queue": "q\x00"}).status_code == 400
        assert http.get("/queues/q%00").status_code == 400

        page = http.get("/jobs", params={"task": "mail.send", "tenant": "acme"})
        nav = http.get("/jobs")
    assert page.status_code == 200
    assert 'name="task" value="mail.send"' in page.text
    assert f'href="/jobs/{jobs["acme"]}"' in page.text
    assert f'href="/jobs/{seeded.available}"' not in page.text
    assert 'href="/jobs/bulk/cancel?task=mail.send&amp;tenant=acme"' in page.text
    assert nav.status_code == 200
    assert '<a href="/jobs" class="on">Jobs</a>' in nav.text


# -- bulk actions -------------------------------------------------------------------


def confirmation(http: Any, verb: str, **filters: str) -> dict[str, Any]:
    preview = http.get(f"/api/jobs/bulk/{verb}", params=filters)
    assert preview.status_code == 200, preview.text
    found: dict[str, Any] = preview.json()
    return found


def confirm_form(preview: dict[str, Any]) -> dict[str, str]:
    return {
        **preview["filters"],
        "max_id": str(preview["max_id"]),
        "issued": str(preview["issued"]),
        "nonce": str(preview.get("nonce", "")),
        "token": preview["token"],
    }


def test_bulk_cancel_and_retry_after_a_confirmation(serve: Callable[..., Served], db: Conn) -> None:  # noqa: F811
    running = enqueue(db, "bulk.job", {"batch": 1}, queue="bulk")
    assert claim(db, "bulk")["id"] == running
    waiting = [enqueue(db, "bulk.job", {"batch": 1}, queue="bulk") for _ in range(5)]
    other = enqueue(db, "bulk.job", {"batch": 2}, queue="bulk")
    with serve().client() as http:
        page = http.get("/jobs/bulk/cancel", params={"queue": "bulk", "args": '{"batch": 1}'})
        assert page.status_code == 200
        assert "This will cancel <b>6</b> jobs" in page.text
        assert 'action="/jobs/bulk/cancel"' in page.text
        preview = confirmation(http, "cancel", queue="bulk", args='{"batch": 1}')
        assert (preview["total"], preview["max_id"]) == (6, waiting[-1])
        late = enqueue(db, "bulk.job", {"batch": 1}, queue="bulk")  # after the confirmation: left alone

        forged = http.post("/jobs/bulk/cancel", data={**confirm_form(preview), "token": "0" * 64})
        widened = http.post("/jobs/bulk/cancel", data={**confirm_form(preview), "args": '{"batch": 2}'})
        cross_site = http.post(
            "/jobs/bulk/cancel", data=confirm_form(preview), headers={"Sec-Fetch-Site": "cross-site"}
        )
        assert (forged.status_code, widened.status_code, cross_site.status_code) == (403, 403, 403)
        assert {current(db, i)["state"] for i in waiting} == {"available"}  # type: ignore[index]

        done = http.post("/jobs/bulk/cancel", data=confirm_form(preview))
        assert done.status_code == 303
        assert done.headers["location"].startswith("/jobs?queue=bulk&")
        shown = http.get(done.headers["location"])
        assert "cancel 6 jobs: 1 cancel_requested, 5 cancelled" in shown.text
        assert {current(db, i)["state"] for i in waiting} == {"cancelled"}  # type: ignore[index]
        assert current(db, running)["cancel_requested_at"] is not None  # type: ignore[index]
        assert current(db, late)["state"] == "available"  # type: ignore[index]
        assert current(db, other)["state"] == "available"  # type: ignore[index]

        retry = confirmation(http, "retry", queue="bulk")
        assert retry["total"] == 5  # the cancelled ones; the running job is not finished yet
        redone = http.post("/api/jobs/bulk/retry", data=confirm_form(retry)).json()
        assert redone == {"action": "retry_many", "total": 5, "results": {"retried": 5}}
        assert {current(db, i)["state"] for i in waiting} == {"available"}  # type: ignore[index]

        nothing = http.get("/jobs/bulk/retry", params={"queue": "bulk", "state": "running"})
        assert "No job matching these filters can be retried" in nothing.text
        assert '<form method="post"' not in nothing.text


def test_a_bulk_confirmation_is_used_once(serve: Callable[..., Served], db: Conn) -> None:  # noqa: F811
    jobs = [enqueue(db, "bulk.once", queue="bulk-once") for _ in range(3)]
    with serve().client() as http:
        preview = confirmation(http, "cancel", queue="bulk-once")
        twin = confirmation(http, "cancel", queue="bulk-once")  # a second page for the same filters
        done = http.post("/jobs/bulk/cancel", data=confirm_form(preview))
        assert done.status_code == 303
        assert {current(db, i)["state"] for i in jobs} == {"cancelled"}  # type: ignore[index]
        db.execute("SELECT pgsched.retry(%s)", [jobs[0]])  # an operator redrives one of them

        replayed = http.post("/jobs/bulk/cancel", data=confirm_form(preview))
        assert replayed.status_code == 403, replayed.text
        assert "already been used" in replayed.text
        assert current(db, jobs[0])["state"] == "available", "a replay changes nothing"  # type: ignore[index]

        other = http.post("/api/jobs/bulk/cancel", data=confirm_form(twin))
        assert other.status_code == 200, "each confirmation page is its own, used once"
        assert current(db, jobs[0])["state"] == "cancelled"  # type: ignore[index]


def test_bulk_confirmations_expire_and_read_only_refuses(
    serve: Callable[..., Served],  # noqa: F811
    db: Conn,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id = enqueue(db, "bulk.job", queue="bulk")
    served = serve()
    with served.client() as http:
        preview = confirmation(http, "cancel", queue="bulk")
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 901)
        expired = http.post("/jobs/bulk/cancel", data=confirm_form(preview))
        monkeypatch.setattr(time, "time", real)
    assert expired.status_code == 403
    assert "expired" in expired.text
    with serve(read_only=True).client() as http:
        page = http.get("/jobs/bulk/cancel", params={"queue": "bulk"})
        refused = http.post("/jobs/bulk/cancel", data=confirm_form(confirmation(http, "cancel", queue="bulk")))
        listing = http.get("/jobs")
    assert "read-only" in page.text
    assert '<form method="post"' not in page.text
    assert refused.status_code == 403
    assert "/jobs/bulk/" not in listing.text
    assert current(db, job_id)["state"] == "available"  # type: ignore[index]


def test_dead_letters_show_the_exception_line_of_a_traceback(
    serve: Callable[..., Served],  # noqa: F811
    db: Conn,  # noqa: F811
) -> None:
    def boom() -> None:
        raise ValueError("boom")

    try:
        try:
            boom()
        except ValueError as exc:
            raise RuntimeError("charge failed for invoice 7") from exc
    except RuntimeError as exc:
        text = "".join(traceback.format_exception(exc)).strip()
    job_id = make_dead(db, "tb", text)
    with serve().client() as http:
        dead = http.get("/dead")
        search = http.get("/jobs", params={"state": "dead"})
    for page in (dead, search):
        row = re.search(rf'href="/jobs/{job_id}".*?</tr>', page.text, re.S)
        assert row is not None
        assert "RuntimeError: charge failed for invoice 7" in row.group(0)
        assert "Traceback (most recent call last)" not in row.group(0)


# -- a real browser ---------------------------------------------------------------


@pytest.fixture
def browser(chromium: str) -> Iterator[Browser]:  # noqa: F811
    b = Browser(chromium, width=1400, height=900)
    yield b
    b.close()


BUTTON_BOX = """
(() => {
  const b = document.querySelector(%s);
  if (!b) return null;
  b.scrollIntoView({block: "center", inline: "nearest"});
  const r = b.getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  return {left: r.left, right: r.right, x: x, y: y, width: innerWidth, hit: document.elementFromPoint(x, y) === b,
          scrollWidth: document.querySelector(".scroll").scrollWidth,
          clientWidth: document.querySelector(".scroll").clientWidth};
})()
"""


@pytest.mark.slow
def test_in_a_browser_at_1400px_charts_live_updates_schedules_buttons(
    serve: Callable[..., Served],  # noqa: F811
    db: Conn,  # noqa: F811
    seeded: Seeded,  # noqa: F811
    history: dict[str, int],
    browser: Browser,
) -> None:
    # Long names, crons and errors are what pushed the buttons off the edge.
    for i in range(3):
        add_schedule(
            db, f"nightly-reconciliation-of-ledger-accounts-{i}", "0 */6 * * 1-5", "America/Argentina/Buenos_Aires"
        )
    db.execute("UPDATE pgsched.schedules SET last_error = repeat('the expansion failed because of a long reason ', 6)")
    served = serve()
    shots = artifacts()
    print(f"\nscreenshots: {shots}")

    browser.open(served.url + "/schedules")
    name = "nightly-reconciliation-of-ledger-accounts-1"
    box = browser.evaluate(BUTTON_BOX % f'"form[action=\\"/schedules/{name}/pause\\"] button"')
    assert box is not None
    assert box["right"] <= box["width"], box  # inside the 1400 px viewport
    assert box["hit"], box  # nothing covers it: a click lands on the button
    assert box["scrollWidth"] <= box["clientWidth"] + 1, box  # the table does not scroll sideways
    browser.click(box["x"], box["y"])
    browser.wait_for("location.search.includes('msg=') && document.readyState === 'complete'")
    row = db.execute("SELECT enabled FROM pgsched.schedules WHERE name = %s", [name]).fetchone()
    assert row == {"enabled": False}
    browser.screenshot(shots / "schedules-1400.png")  # with the flash line of the pause

    pages = {
        "overview": "/",
        "queue": f"/queues/{HIST}",
        "queue-day": f"/queues/{HIST}?window=1d",
        "jobs": "/jobs?task=mail.*",
        "bulk-cancel": "/jobs/bulk/cancel?queue=mail",
        "dead": "/dead",
    }
    for label, path in pages.items():
        browser.open(served.url + path)
        charts = browser.evaluate("document.querySelectorAll('figure.chart svg polyline').length")
        if label in ("overview", "queue", "queue-day"):
            assert charts >= 4, label
            width = browser.evaluate("document.querySelector('figure.chart').getBoundingClientRect().width")
            assert 300 < width < 700, (label, width)
        target = browser.screenshot(shots / f"{label}-1400.png")
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert target.stat().st_size > 10_000

    # Live: the queue page fetches its charts again and shows work finished after it was loaded.
    browser.open(f"{served.url}/queues/live?live=1")
    legend = "document.querySelector('[data-chart=throughput] .key b').textContent"
    assert browser.evaluate(legend) == "0"  # nothing yet
    for _ in range(3):
        job_id = enqueue(db, "t.live", queue="live")
        leased = claim(db, "live")
        db.execute(
            "SELECT * FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [job_id, leased["lease_token"]]
        )
    db.execute("SELECT pgsched.rollup_queue_history(p_since => now() - interval '1 minute')")
    assert browser.wait_for(f"{legend} === '3' && document.getElementById('live').dataset.updated") is not None
    assert not [line for line in browser.console if "Content Security Policy" in line], browser.console
    browser.screenshot(shots / "queue-live-1400.png")
