"""Delayed-job start lag: jobs due 0.2-2 s after they are enqueued, and how late their handlers start.

An idle worker (and, where a configuration has one, pgsched's scanner) runs
before anything is enqueued. A few jobs due at once warm it up; then N jobs
are enqueued together, due at evenly spread times between ``delayed_min_s``
and ``delayed_max_s`` from now, each with the system's own API for delayed
jobs. The due time each system *stored* is read back right away (PgQueuer
takes a delay relative to the database's clock, the others an instant).

Lag of a job = handler start (``time.time()`` in the worker) minus its stored
due time. PostgreSQL runs on this machine, so both are the same system clock;
the harness checks the offset and notes it. Where the system records when a
job was claimed (pgsched's ``job_history.started_at``, the raw loop's
``started_at``, procrastinate's 'started' event), "claim lag" is that minus the
due time, both read on the database's clock.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from bench.harness import db
from bench.harness.options import Options
from bench.harness.workers import WorkerPool
from bench.scenarios.base import (
    Case,
    CaseEnv,
    Metrics,
    RowSummary,
    Scenario,
    first_figure,
    fmt_ms,
    fmt_ratio,
    percentile,
    status_cell,
    table,
)
from bench.systems.base import Caps, DrainConfig, System

#: Warm-up jobs (due at once, left out of the figures) carry i from here on.
WARMUP_BASE = 1_000_000
WARMUP_JOBS = 5
#: After the last due time, how long the slowest pollers (5 s) get to start the rest.
GRACE_S = 12.0


def _clock_offset(conn: Any) -> float:
    """The database clock minus time.time(), in seconds (best of a few round trips)."""
    best: tuple[float, float] | None = None
    for _ in range(5):
        before = time.time()
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        after = time.time()
        width = after - before
        if best is None or width < best[0]:
            best = (width, float(row[0]) - (before + after) / 2)
    assert best is not None
    return best[1]


def _stats(values: list[float], prefix: str = "") -> dict[str, float]:
    return {
        f"{prefix}p50": percentile(values, 50),
        f"{prefix}p95": percentile(values, 95),
        f"{prefix}p99": percentile(values, 99),
        f"{prefix}max": max(values),
        f"{prefix}min": min(values),
    }


class DelayedScenario(Scenario):
    """Milliseconds from a delayed job's due time to its handler's start."""

    name = "delayed"
    title = "Delayed jobs: start lag after the due time (ms, lower is better)"
    description = "jobs due 0.2-2 s after enqueue, idle worker (pgsched: with and without a scanner): start - due"
    primary = "p50"
    higher_is_better = False
    ratio_metrics = ("p50", "p99")
    summary_metrics = ("p50", "p95", "p99", "max", "min", "db_p50", "db_p99")

    def sizes(self, opts: Options) -> str:
        return (
            f"{opts.delayed_jobs} jobs enqueued at once, due {opts.delayed_min_s:g}–{opts.delayed_max_s:g} s later "
            f"(evenly spread), after {WARMUP_JOBS} warm-up jobs due at once. *handler lag*: handler start "
            "(time.time() in the worker) − stored due time; *claim lag*: the claim's timestamp − due time, both "
            "on the database clock (pgsched: job_history.started_at − run_at)"
        )

    def progress(self, metrics: Metrics) -> str:
        return (
            f"lag p50 {metrics['p50']:.1f} ms  p99 {metrics['p99']:.1f} ms  max {metrics['max']:.1f} ms"
            f"  ({metrics['received']}/{metrics['sent']})"
        )

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        return [
            Case(
                scenario=self.name,
                system=system.name,
                id=config.id,
                label=config.label,
                group="delayed",
                params={"config": asdict(config), "n": opts.delayed_jobs},
            )
            for config in system.delayed_configs(caps)
        ]

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        config = DrainConfig(**case.params["config"])
        n = int(case.params["n"])
        opts = env.opts
        with db.connect(env.dsn) as conn:
            db.reset(conn, system.truncate_tables)
            notes = db.settle(conn, system.truncate_tables)
            offset = _clock_offset(conn)
            if abs(offset) > 0.002:
                notes.append(f"database clock − time.time() = {offset * 1000:+.1f} ms (corrected)")
            with system.side_processes(env.dsn, config, env.work_dir):
                pool = WorkerPool(system.name, env.dsn, config, env.caps, env.work_dir, latency_dir=env.work_dir)
                try:
                    pool.start()
                    pool.go()
                    time.sleep(opts.latency_settle_s)
                    pool.check_alive()
                    now = datetime.now(UTC)
                    asyncio.run(
                        system.enqueue_at(env.dsn, [(WARMUP_BASE + k, now) for k in range(WARMUP_JOBS)], env.caps)
                    )
                    self._wait(pool, WARMUP_JOBS, time.monotonic() + GRACE_S)
                    warm = pool.done()
                    base = time.time()
                    step = (opts.delayed_max_s - opts.delayed_min_s) / max(1, n - 1)
                    targets = [base + opts.delayed_min_s + k * step for k in range(n)]
                    jobs = [(k, datetime.fromtimestamp(t, UTC)) for k, t in enumerate(targets)]
                    asyncio.run(system.enqueue_at(env.dsn, jobs, env.caps))
                    enqueued_in = time.time() - base
                    stored = {int(i): float(due) for i, due in conn.execute(system.due_times_sql).fetchall()}
                    self._wait(pool, warm + n, time.monotonic() + opts.delayed_max_s + GRACE_S)
                finally:
                    pool.stop()
            db_lags = {}
            if system.db_start_lag_sql:
                db_lags = {int(i): float(lag) for i, lag in conn.execute(system.db_start_lag_sql).fetchall()}
        if enqueued_in > opts.delayed_min_s / 2:
            notes.append(f"enqueueing the {n} jobs took {enqueued_in * 1000:.0f} ms")
        hits = pool.latency_hits()
        missing_due = [k for k in range(n) if k not in stored]
        if missing_due:
            notes.append(f"{len(missing_due)} stored due times could not be read back; their targets were used")
        due = {k: stored.get(k, targets[k]) - offset for k in range(n)}
        lags = [(hits[k] - due[k]) * 1000.0 for k in range(n) if k in hits]
        if not lags:
            raise RuntimeError("no delayed job reached a handler")
        if len(lags) < n:
            notes.append(f"only {len(lags)} of {n} jobs started within {GRACE_S:.0f} s of the last due time")
        metrics: Metrics = _stats(lags)
        claim_lags = [db_lags[k] * 1000.0 for k in range(n) if k in db_lags]
        if claim_lags:
            metrics |= _stats(claim_lags, "db_")
        metrics |= {"received": len(lags), "sent": n, "clock_offset_ms": offset * 1000.0, "notes": notes}
        return metrics

    @staticmethod
    def _wait(pool: WorkerPool, count: int, deadline: float) -> None:
        while pool.done() < count and time.monotonic() < deadline:
            time.sleep(0.01)
            pool.check_alive()

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        return first_figure(same_round, metric, lambda other: other.system == "raw")

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        out = []
        for row in rows:
            status = status_cell(row)
            if status:
                out.append([row.title, row.case.label, status] + [""] * 7)
                continue
            s = row.stats
            out.append(
                [
                    row.title,
                    row.case.label,
                    fmt_ms(s.get("p50")),
                    fmt_ms(s.get("p95")),
                    fmt_ms(s.get("p99")),
                    fmt_ms((s["max"][2],) * 3 if "max" in s else None, spread=False),
                    fmt_ms(s.get("db_p50"), spread=False) + " / " + fmt_ms(s.get("db_p99"), spread=False)
                    if "db_p50" in s
                    else "—",
                    fmt_ratio(row.ratios.get("p50/raw")),
                    fmt_ratio(row.ratios.get("p99/raw")),
                    fmt_ratio(row.ratios.get("p50/peer")),
                ]
            )
        return table(
            [
                "system",
                "worker",
                "handler lag p50",
                "p95",
                "p99",
                "max",
                "claim lag p50 / p99 (db clock)",
                "p50 × raw",
                "p99 × raw",
                "p50 × best peer",
            ],
            out,
        )
