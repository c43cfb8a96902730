"""Prometheus metrics: a worker's own counters (in process and over HTTP), and the database collector."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg_pool import ConnectionPool

from pgsched import App, JobContext, Retry, Snooze
from pgsched.errors import ConfigurationError
from pgsched.observe.metrics import OUTCOMES, QueueCollector, WorkerMetrics
from pgsched.runtime.worker import Worker, WorkerOptions
from tests.integration.conftest import Running, wait_all, wait_for

StartWorker = Callable[..., Running]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a Prometheus exposition, by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def total(found: Samples, name: str) -> float:
    return sum(v for (n, _), v in found.items() if n == name)


def test_worker_counts_each_outcome_per_queue_and_task(
    app: App, conn: psycopg.Connection[Any], start_worker: StartWorker
) -> None:
    @app.task(name="m.ok")
    def ok() -> None: ...

    @app.task(name="m.doomed", queue="fragile", max_attempts=1)
    def doomed() -> None:
        raise ValueError("no")

    @app.task(name="m.flaky")
    def flaky(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise Retry(0.01)

    napped: list[int] = []

    @app.task(name="m.nap")
    def nap(ctx: JobContext) -> None:
        if not napped:
            napped.append(ctx.id)
            raise Snooze(0.01)

    ids = [ok.enqueue(), ok.enqueue(), ok.enqueue(), flaky.enqueue(), nap.enqueue()]
    dead_id = doomed.enqueue()
    running = start_worker(queues=["default", "fragile"], metrics_port=0, poll_interval=0.05)
    worker = running.worker
    wait_all(conn, ids, "completed")
    wait_all(conn, [dead_id], "dead")
    expected = {
        ("default", "m.ok", "completed"): 3,
        ("fragile", "m.doomed", "dead"): 1,
        ("default", "m.flaky", "retried"): 1,
        ("default", "m.flaky", "completed"): 1,
        ("default", "m.nap", "snoozed"): 1,
        ("default", "m.nap", "completed"): 1,
    }
    wait_for(lambda: worker.metrics.totals() == expected, what=f"outcome counts {worker.metrics.totals()}")
    assert worker.metrics.claimed() == {
        ("default", "m.ok"): 3,
        ("default", "m.flaky"): 2,
        ("default", "m.nap"): 2,
        ("fragile", "m.doomed"): 1,
    }

    port = worker.metrics_port
    assert port
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert response.status_code == 200
    found = parse(response.text)
    for (queue, task, outcome), n in expected.items():
        assert value(found, "pgsched_worker_jobs_total", queue=queue, task=task, outcome=outcome) == n
    assert total(found, "pgsched_worker_claimed_jobs_total") == 8
    assert value(found, "pgsched_worker_running") == 0
    assert value(found, "pgsched_worker_concurrency") == 10
    assert value(found, "pgsched_worker_info", worker=worker.name, version="0.1.0") == 1
    claims = value(found, "pgsched_claim_seconds_count")
    assert claims >= 4  # at least one claim per attempt wave
    assert value(found, "pgsched_claim_seconds_bucket", le="+Inf") == claims
    assert 0 < value(found, "pgsched_claim_seconds_sum") < claims  # each claim well under a second
    assert "process_cpu_seconds_total" in {name for name, _ in found}

    running.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_running_gauge_counts_jobs_held_now(app: App, conn: psycopg.Connection[Any], start_worker: StartWorker) -> None:
    release = threading.Event()

    @app.task(name="m.block")
    def block() -> None:
        release.wait(60)

    ids = [block.enqueue() for _ in range(3)]
    running = start_worker(concurrency=2, prefetch=0)
    try:
        wait_for(lambda: running.worker.metrics.running() == 2, what="two jobs held")
        found = parse(generate_latest(_registry(running.worker.metrics)).decode())
        assert value(found, "pgsched_worker_running") == 2
    finally:
        release.set()
    wait_all(conn, ids, "completed")
    wait_for(lambda: running.worker.metrics.running() == 0, what="nothing held")


def _registry(collector: Any) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


def test_counting_is_exact_from_many_threads_while_scraping() -> None:
    metrics = WorkerMetrics(name="w", concurrency=4)
    per_thread, threads = 20_000, 8
    stop = threading.Event()
    scrapes: list[float] = []

    def count(i: int) -> None:
        outcome = OUTCOMES[i % len(OUTCOMES)]
        for _ in range(per_thread):
            metrics.count("q", "t", outcome)
        metrics.count_claimed([("q", "t")] * per_thread)

    def scrape() -> None:
        while not stop.is_set():
            found = parse(generate_latest(_registry(metrics)).decode())
            scrapes.append(total(found, "pgsched_worker_jobs_total"))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    workers = [threading.Thread(target=count, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    scraper.join()
    assert sum(metrics.totals().values()) == per_thread * threads
    assert metrics.totals()[("q", "t", OUTCOMES[0])] == per_thread * 2  # threads 0 and 6
    assert sum(metrics.claimed().values()) == per_thread * threads
    assert scrapes == sorted(scrapes), "a counter went backwards between scrapes"


def test_worker_options_refuse_a_bad_metrics_port(app: App) -> None:
    with pytest.raises(ConfigurationError, match="metrics port"):
        WorkerOptions(metrics_port=70000).validate()
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        options = WorkerOptions(metrics_port=busy.getsockname()[1], install_signal_handlers=False)
        with pytest.raises(ConfigurationError, match="cannot serve metrics"):
            Worker(app, options).run()


def test_queue_collector_reads_the_database_at_every_scrape(dsn: str, conn: psycopg.Connection[Any]) -> None:
    for _ in range(2):
        conn.execute("SELECT pgsched.enqueue('t.a', '{}', 'alpha')")
    conn.execute("SELECT pgsched.pause_queue('beta')")
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool:
        registry = _registry(QueueCollector(pool))
        first = parse(generate_latest(registry).decode())
        conn.execute("SELECT pgsched.enqueue('t.a', '{}', 'alpha')")
        second = parse(generate_latest(registry).decode())
    assert value(first, "pgsched_database_up") == 1
    assert value(first, "pgsched_jobs", queue="alpha", state="available") == 2
    assert value(second, "pgsched_jobs", queue="alpha", state="available") == 3  # never a cached number
    assert value(first, "pgsched_queue_paused", queue="beta") == 1
    assert value(first, "pgsched_jobs", queue="beta", state="available") == 0
    assert value(first, "pgsched_oldest_due_age_seconds", queue="alpha") >= 0
    assert not [name for name, _ in first if "quantile" in name or name.endswith("_5m")]
    assert value(first, "pgsched_workers_live") == 0


def test_queue_collector_says_when_the_database_is_down() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    bad = f"postgresql://nobody@127.0.0.1:{port}/none?connect_timeout=1"
    pool: ConnectionPool[Any] = ConnectionPool(bad, min_size=0, max_size=1, open=True, timeout=0.5)
    try:
        found = parse(generate_latest(_registry(QueueCollector(pool))).decode())
    finally:
        pool.close()
    assert found == {("pgsched_database_up", frozenset()): 0.0}
