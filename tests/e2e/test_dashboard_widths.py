"""Every page of the dashboard stays readable from 1,280 to 2,560 px wide with long values (args, errors, task,
queue, worker and schedule names): long cells are cut with the whole value in a tooltip, or wrap, and no
column is squeezed to a sliver."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from tests.e2e.browser import Browser
from tests.e2e.clirun import claim
from tests.e2e.test_dashboard import Conn, Served, chromium, db, serve  # noqa: F401 (fixtures)
from tests.scheduling.helpers import add_schedule

LONG_TASK = "billing.reconciliation." + "monthly_ledger_accounts_" * 6
LONG_QUEUE = "ledger-reconciliation-" + "q" * 30
LONG_WORKER = "worker-" + "host-with-a-long-name." * 6
LONG_ERROR = "ValueError: " + "the ledger did not balance for account 4711 after applying the corrections " * 5


def seed_long_values(conn: Conn) -> int:
    """A dead letter, a waiting job and a schedule whose every text is long; the dead letter's id."""
    args = {"payload": "x" * 300, "customer": {"name": "A" * 120, "notes": ["n" * 80] * 3}}
    dead = conn.execute(
        "SELECT pgsched.enqueue(%s, %s, %s, max_attempts => 1) AS id", [LONG_TASK, Jsonb(args), LONG_QUEUE]
    ).fetchone()["id"]  # type: ignore[index]
    leased = claim(conn, LONG_QUEUE, worker=LONG_WORKER)
    conn.execute("SELECT pgsched.fail(%s, %s, %s)", [dead, leased["lease_token"], LONG_ERROR])
    conn.execute("SELECT pgsched.enqueue(%s, %s, %s)", [LONG_TASK, Jsonb(args), LONG_QUEUE])
    conn.execute(
        "SELECT pgsched.register_worker(%s, 'host-1', 4242, ARRAY[%s], '{}', 8, '0.1.0')", [LONG_WORKER, LONG_QUEUE]
    )
    add_schedule(conn, "nightly-reconciliation-of-ledger-accounts-" + "x" * 60, "0 */6 * * 1-5", "UTC")
    return int(dead)


# Per table on the page: how far it overflows its box, and its narrowest column (heading, width in px)
# among those whose cells hold text longer than their heading and do not show it whole: a cell is cut (an
# element or the cell itself narrower than its text) or its text wraps onto more lines than one. A column
# of short values shown whole ("12.3s ago") is as wide as it needs to be, however narrow.
MEASURE = """
(() => {
  const cut = (td) => {
    if (!td) return false;
    if ([td, ...td.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1)) return true;
    const range = document.createRange();
    range.selectNodeContents(td);
    const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
    return tops.size > 1;
  };
  return [...document.querySelectorAll('table')].map(t => {
  const box = t.closest('.scroll') || t.parentElement;
  const heads = [...t.querySelectorAll('thead th')];
  const rows = [...t.querySelectorAll('tbody tr')];
  const cols = heads.filter(th => th.textContent !== '').map((th) => ({
    heading: th.textContent, width: th.getBoundingClientRect().width,
    longest: Math.max(0, ...rows.map(r => (r.children[th.cellIndex] || {textContent: ''}).textContent.length)),
    cut: rows.some(r => cut(r.children[th.cellIndex])),
  })).filter(c => c.longest > c.heading.length + 4 && c.cut);
  const narrowest = cols.reduce((a, c) => (a === null || c.width < a.width ? c : a), null);
  return {overflow: box.scrollWidth - box.clientWidth, page: document.documentElement.scrollWidth - innerWidth,
          narrowest: narrowest && [narrowest.heading, Math.round(narrowest.width)]};
  });
})()
"""


@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 2560])
def test_every_page_stays_readable_with_long_values(
    serve: Callable[..., Served],  # noqa: F811
    db: Conn,  # noqa: F811
    chromium: str,  # noqa: F811
    width: int,
) -> None:
    """About 4 s a width: one Chromium, six pages."""
    dead = seed_long_values(db)
    served = serve()
    pages = {
        "overview": "/",
        "queue": f"/queues/{LONG_QUEUE}",
        "jobs": "/jobs",
        "dead": "/dead",
        "schedules": "/schedules",
        "job": f"/jobs/{dead}",
    }
    browser = Browser(chromium, width=width, height=1000)
    problems: dict[str, Any] = {}
    try:
        for label, path in pages.items():
            browser.open(served.url + path)
            for table in browser.evaluate(MEASURE):
                squeezed = table["narrowest"] is not None and table["narrowest"][1] < 100
                if table["overflow"] > 1 or table["page"] > 1 or squeezed:
                    problems.setdefault(label, []).append(table)
            tips = browser.evaluate(
                "[...document.querySelectorAll('td [title]')].some(e => e.title.includes('xxxxxxxxxxxxxxxxxxxx'))"
            )
            if label in ("dead", "jobs", "queue") and not tips:
                problems.setdefault(label, []).append("the cut args have no tooltip with the whole value")
    finally:
        browser.close()
    assert problems == {}, problems
