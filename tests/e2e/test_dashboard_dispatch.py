"""The dashboard's overview: dispatch policies, worker pools, and due jobs no live worker's labels can take."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.clirun import connect
from tests.e2e.test_dashboard import Served, serve

__all__ = ["serve"]  # the fixture, shared with test_dashboard


def test_overview_shows_policies_pools_and_unserved_labels(serve: Callable[..., Served], dsn: str) -> None:
    with connect(dsn) as conn:
        conn.execute("SELECT pgsched.configure_queue('render', concurrency => 4, aging => '30 s')")
        conn.execute("SELECT pgsched.enqueue('t.gpu', queue => 'render', labels => '{gpu}')")
        conn.execute("SELECT pgsched.register_worker('cpu-box', 'h', 1, ARRAY['render'], ARRAY['cpu'], 4, 'test')")
    with serve().client() as http:
        html = http.get("/").text
        api = http.get("/api/overview").json()
    assert "<h2>Dispatch policies</h2>" in html
    assert "concurrency 4, aging 30s" in html
    assert "<h2>Worker pools</h2>" in html
    assert "Due jobs whose labels no live worker offers" in html
    assert [(p["labels"], p["workers"]) for p in api["pools"]] == [(["cpu"], ["cpu-box"])]
    assert [(u["queue"], u["labels"], u["available"]) for u in api["unserved_labels"]] == [("render", ["gpu"], 1)]
    assert api["policies"][0]["concurrency"] == 4


def test_overview_shows_jobs_whose_task_no_live_worker_has_registered(serve: Callable[..., Served], dsn: str) -> None:
    """Issue 21.5: the jobs a worker handed back for their task while no live worker knows it."""
    with connect(dsn) as conn:
        conn.execute("SELECT pgsched.enqueue('mailer.send', queue => 'shared')")
        conn.execute(
            "SELECT pgsched.register_worker('billing-box', queues => ARRAY['shared'], tasks => ARRAY['billing.charge'])"
        )
        conn.execute(
            "SELECT pgsched.pass_over(ARRAY[id], ARRAY[lease_token])"
            " FROM pgsched.claim('billing-box', ARRAY['shared'], 1, '30 seconds')"
        )
    with serve().client() as http:
        html = http.get("/").text
        api = http.get("/api/overview").json()
    assert "Jobs whose task no live worker has registered" in html
    assert "mailer.send" in html
    assert [(u["queue"], u["task"], u["jobs"]) for u in api["unserved_tasks"]] == [("shared", "mailer.send", 1)]
