"""Metric names and types as Prometheus expects them, scraped from real endpoints over HTTP.

Counters end in _total and never go back between scrapes; run time and start
lag are histograms; nothing carries a time window in its name or a
pre-computed quantile; the queue-wide numbers are gauges.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg_pool import ConnectionPool

from pgsched import App
from pgsched.observe.metrics import MetricsServer, QueueCollector, worker_registry
from tests.integration.conftest import Running, wait_all, wait_for

StartWorker = Callable[..., Running]

WORKER_TYPES = {
    "pgsched_jobs_finished": "counter",
    "pgsched_job_duration_seconds": "histogram",
    "pgsched_job_start_lag_seconds": "histogram",
    "pgsched_worker_jobs": "counter",
    "pgsched_worker_claimed_jobs": "counter",
    "pgsched_claim_seconds": "histogram",
    "pgsched_worker_running": "gauge",
    "pgsched_worker_concurrency": "gauge",
    "pgsched_worker_info": "gauge",
    "pgsched_worker_loops_abandoned": "counter",
    "pgsched_worker_job_progress": "gauge",
}
QUEUE_TYPES = {
    "pgsched_database_up": "gauge",
    "pgsched_jobs": "gauge",
    "pgsched_oldest_due_age_seconds": "gauge",
    "pgsched_retrying_jobs": "gauge",
    "pgsched_expired_leases": "gauge",
    "pgsched_dead_letters": "gauge",
    "pgsched_queue_paused": "gauge",
    "pgsched_workers_live": "gauge",
    "pgsched_xmin_horizon_age_seconds": "gauge",
    "pgsched_xmin_horizon_age_xids": "gauge",
    "pgsched_dead_tuples": "gauge",
}
REPLICA_TYPES = {"pgsched_read_replica": "gauge", "pgsched_replica_lag_seconds": "gauge"}  # with --read-dsn
WINDOWED = re.compile(r"_\d+(ms|s|m|h|d)(_|$)")


def scrape(url: str) -> dict[str, Any]:
    response = httpx.get(url, timeout=5)
    assert response.status_code == 200, response.text
    return {f.name: f for f in text_string_to_metric_families(response.text) if f.name.startswith("pgsched_")}


def sample(families: dict[str, Any], name: str, suffix: str = "", **labels: str) -> float:
    for s in families[name].samples:
        if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no sample {name}{suffix} {labels}")


def assert_conventions(families: dict[str, Any]) -> None:
    for name, family in families.items():
        assert not WINDOWED.search(name), f"{name}: a time window belongs in PromQL, not in a metric name"
        for s in family.samples:
            assert "quantile" not in s.labels, f"{name}: a pre-computed quantile"
            if family.type == "counter":
                assert s.name.endswith(("_total", "_created")), s.name


def test_worker_endpoint_serves_counters_and_histograms(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="m.nap", queue="naps")
    def nap(seconds: float) -> None:
        time.sleep(seconds)

    @app.task(name="m.doomed", queue="naps", max_attempts=1)
    def doomed() -> None:
        raise ValueError("no")

    # Due 30 seconds ago: the start lag says so, measured on the database's clock.
    late = conn.execute(
        "SELECT pgsched.enqueue('m.nap', '{\"seconds\": 0.2}', 'naps', now() - interval '30 seconds') AS id"
    ).fetchone()
    assert late is not None
    ids = [late["id"], nap.enqueue(0.0)]
    dead = [doomed.enqueue()]
    running = start_worker(queues=["naps"], metrics_port=0, poll_interval=0.05)
    wait_all(conn, ids, "completed")
    wait_all(conn, dead, "dead")
    url = f"http://127.0.0.1:{running.worker.metrics_port}/metrics"
    wait_for(lambda: sum(running.worker.metrics.totals().values()) == 3, what="three outcomes written")
    first = scrape(url)

    assert {name: first[name].type for name in WORKER_TYPES} == WORKER_TYPES
    assert_conventions(first)
    finished = "pgsched_jobs_finished"
    assert sample(first, finished, "_total", queue="naps", task="m.nap", state="completed") == 2
    assert sample(first, finished, "_total", queue="naps", task="m.doomed", state="dead") == 1
    duration = "pgsched_job_duration_seconds"
    assert sample(first, duration, "_count", queue="naps", task="m.nap") == 2
    assert sample(first, duration, "_sum", queue="naps", task="m.nap") >= 0.2
    assert sample(first, duration, "_bucket", queue="naps", task="m.nap", le="0.1") == 1  # the 0 s nap
    assert sample(first, duration, "_bucket", queue="naps", task="m.nap", le="+Inf") == 2
    lag = "pgsched_job_start_lag_seconds"
    assert sample(first, lag, "_count", queue="naps", task="m.nap") == 2
    assert sample(first, lag, "_bucket", queue="naps", task="m.nap", le="10.0") == 1  # the one due now
    assert sample(first, lag, "_sum", queue="naps", task="m.nap") >= 30

    more = [nap.enqueue(0.0) for _ in range(3)]
    wait_all(conn, more, "completed")
    wait_for(lambda: sum(running.worker.metrics.totals().values()) == 6, what="six outcomes written")
    second = scrape(url)
    assert sample(second, finished, "_total", queue="naps", task="m.nap", state="completed") == 5
    assert sample(second, duration, "_count", queue="naps", task="m.nap") == 5
    for name in (duration, lag, finished):
        after = {(t.name, tuple(sorted(t.labels.items()))): t.value for t in second[name].samples}
        for s in first[name].samples:
            now = after.get((s.name, tuple(sorted(s.labels.items()))))
            assert now is not None, f"{s.name}{s.labels} vanished"
            assert now >= s.value, f"{s.name}{s.labels} went from {s.value} to {now}"


def test_start_lag_counts_the_wait_for_a_free_slot(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    """One slot and two jobs due now, claimed together: whichever starts second waits 2 s in the worker for the
    slot, and its start lag says so (handler start - due, as job_history's started_at - run_at), though it was
    claimed at once."""

    @app.task(name="m.hold", queue="slots")
    def hold(seconds: float) -> None:
        time.sleep(seconds)

    ids = [hold.enqueue(2.0), hold.enqueue(2.0)]
    running = start_worker(queues=["slots"], metrics_port=0, concurrency=1, prefetch=1, poll_interval=0.05)
    wait_all(conn, ids, "completed")
    wait_for(lambda: sum(running.worker.metrics.totals().values()) == 2, what="two outcomes written")
    row = conn.execute(
        "SELECT count(DISTINCT claimed_at) AS claims,"
        " sum(extract(epoch FROM started_at - run_at))::float8 AS started,"
        " sum(extract(epoch FROM claimed_at - run_at))::float8 AS claimed"
        " FROM pgsched.job_history WHERE id = ANY(%s)",
        [ids],
    ).fetchone()
    assert row is not None
    assert row["claims"] == 1, "both were claimed in one batch (one slot + one prefetched)"
    assert row["started"] - row["claimed"] >= 1.9  # the second one's wait for the slot
    families = scrape(f"http://127.0.0.1:{running.worker.metrics_port}/metrics")
    lag = "pgsched_job_start_lag_seconds"
    assert sample(families, lag, "_count", queue="slots", task="m.hold") == 2
    assert abs(sample(families, lag, "_sum", queue="slots", task="m.hold") - row["started"]) < 0.75


def test_queue_gauges_over_http_have_no_windows_or_quantiles(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pgsched.enqueue('t.a', '{}', 'alpha', now() - interval '2 minutes')")
    with ConnectionPool(dsn, min_size=0, max_size=1, open=True) as pool:
        server = MetricsServer(worker_registry(QueueCollector(pool)), port=0)
        server.start()
        try:
            assert server.host == "127.0.0.1"
            families = scrape(f"{server.url}/metrics")
        finally:
            server.stop()
    assert {name: families[name].type for name in QUEUE_TYPES} == QUEUE_TYPES
    assert set(families) == set(QUEUE_TYPES), "every queue metric is listed in docs/metrics and here"
    assert_conventions(families)
    assert sample(families, "pgsched_jobs", queue="alpha", state="available") == 1
    assert sample(families, "pgsched_oldest_due_age_seconds", queue="alpha") >= 119


def test_histograms_are_exact_from_many_threads_while_scraping() -> None:
    from pgsched.observe.metrics import WorkerMetrics

    metrics = WorkerMetrics(name="w")
    per_thread, threads = 5_000, 6
    stop = threading.Event()
    counts: list[float] = []

    def observe() -> None:
        for i in range(per_thread):
            metrics.observe_run("q", "t", (i % 100) / 100)

    def watch() -> None:
        while not stop.is_set():
            text = generate_latest(worker_registry(metrics)).decode()
            for family in text_string_to_metric_families(text):
                if family.name == "pgsched_job_duration_seconds":
                    counts.extend(s.value for s in family.samples if s.name.endswith("_count"))

    watcher = threading.Thread(target=watch)
    watcher.start()
    pool = [threading.Thread(target=observe) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    stop.set()
    watcher.join()
    final = {
        s.name: s.value
        for family in text_string_to_metric_families(generate_latest(worker_registry(metrics)).decode())
        if family.name == "pgsched_job_duration_seconds"
        for s in family.samples
        if s.labels.get("le") in (None, "+Inf")
    }
    assert final["pgsched_job_duration_seconds_count"] == per_thread * threads
    assert final["pgsched_job_duration_seconds_bucket"] == per_thread * threads
    assert counts == sorted(counts), "a histogram count went backwards between scrapes"


def test_docs_list_every_metric_and_the_dashboard_and_alerts_use_only_real_ones() -> None:
    import json
    from pathlib import Path

    from pgsched.observe.metrics import replica_families

    replica = replica_families({"in_recovery": True, "lag_s": 0.5})
    assert {family.name: family.type for family in replica} == REPLICA_TYPES
    docs = Path(__file__).resolve().parents[2] / "docs"
    exposed = {_exposed_name(name, kind) for name, kind in {**WORKER_TYPES, **QUEUE_TYPES, **REPLICA_TYPES}.items()}
    listed = set(re.findall(r"^\| `(pgsched_[a-z_]+)` \|", (docs / "metrics.md").read_text(), flags=re.MULTILINE))
    assert listed == exposed
    known = exposed | {
        f"{n}_{s}" for n, k in WORKER_TYPES.items() if k == "histogram" for s in ("bucket", "count", "sum")
    }
    dashboard = json.loads((docs / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    alerts = (docs / "alerts.yml").read_text()
    exprs += re.findall(r"^\s+expr: (.+)$", alerts, flags=re.MULTILINE)
    assert len(re.findall(r"- alert: ", alerts)) >= 4
    used = {name for expr in exprs for name in re.findall(r"\bpgsched_[a-z_]+", expr)}
    assert used, "the dashboard and the alerts query pgsched metrics"
    assert used <= known, f"not exposed: {used - known}"
    for needed in ("pgsched_oldest_due_age_seconds", "pgsched_dead_letters", "pgsched_workers_live"):
        assert needed in " ".join(re.findall(r"^\s+expr: (.+)$", alerts, flags=re.MULTILINE))
    assert "pgsched_expired_leases" in alerts


def _exposed_name(name: str, kind: str) -> str:
    return f"{name}_total" if kind == "counter" else name
