"""Pickup latency: an idle listening worker; jobs enqueued at a steady pace by another process.

Latency of a job = handler start (``time.time()`` in the worker) minus the
start of its enqueue call (``time.time()`` in the producer). Both processes
read the same system clock. "From commit" subtracts the end of the enqueue
call instead, i.e. what remains once the transaction is acknowledged.
A few warm-up jobs go first and are left out of the figures.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict

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


class LatencyScenario(Scenario):
    """Milliseconds from enqueue call to handler start, for an idle worker."""

    name = "latency"
    title = "Pickup latency, idle listening worker (ms, lower is better)"
    description = "jobs enqueued at a steady pace by another process: enqueue-call start -> handler start"
    primary = "p50"
    higher_is_better = False
    ratio_metrics = ("p50", "p99")
    summary_metrics = ("p50", "p95", "p99", "max", "p50_commit", "call_p50")

    def sizes(self, opts: Options) -> str:
        return (
            f"{opts.latency_jobs} jobs {opts.latency_interval_ms:g} ms apart after {opts.latency_warmup} warm-up jobs"
        )

    def progress(self, metrics: Metrics) -> str:
        return (
            f"p50 {metrics['p50']:.2f} ms  p99 {metrics['p99']:.2f} ms  max {metrics['max']:.2f} ms"
            f"  ({metrics['received']}/{metrics['sent']})"
        )

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        config = system.latency_config(caps)
        return [
            Case(
                scenario=self.name,
                system=system.name,
                id=config.id,
                label=config.label,
                group="latency",
                params={"config": asdict(config), "n": opts.latency_jobs},
            )
        ]

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        config = DrainConfig(**case.params["config"])
        n = int(case.params["n"])
        warmup = env.opts.latency_warmup
        total = warmup + n
        interval = env.opts.latency_interval_ms / 1000.0
        with db.connect(env.dsn) as conn:
            db.reset(conn, system.truncate_tables)
            notes = db.settle(conn, system.truncate_tables)
        pool = WorkerPool(system.name, env.dsn, config, env.caps, env.work_dir, latency_dir=env.work_dir)
        try:
            pool.start()
            pool.go()
            starts, ends = asyncio.run(self._produce(system, env, total, interval, pool))
            deadline = time.monotonic() + 5.0
            while pool.done() < total and time.monotonic() < deadline:
                time.sleep(0.01)
                pool.check_alive()
        finally:
            pool.stop()
        hits = pool.latency_hits()
        from_call = [(hits[i] - starts[i]) * 1000.0 for i in range(warmup, total) if i in hits]
        from_commit = [(hits[i] - ends[i]) * 1000.0 for i in range(warmup, total) if i in hits]
        calls = [(ends[i] - starts[i]) * 1000.0 for i in range(warmup, total)]
        if not from_call:
            raise RuntimeError("no probe job reached a handler")
        received = len(from_call)
        if received < n:
            notes.append(f"only {received} of {n} probe jobs reached a handler within 5 s")
        return {
            "p50": percentile(from_call, 50),
            "p95": percentile(from_call, 95),
            "p99": percentile(from_call, 99),
            "max": max(from_call),
            "p50_commit": percentile(from_commit, 50),
            "call_p50": percentile(calls, 50),
            "received": received,
            "sent": n,
            "notes": notes,
        }

    @staticmethod
    async def _produce(
        system: System, env: CaseEnv, total: int, interval: float, pool: WorkerPool
    ) -> tuple[list[float], list[float]]:
        """Enqueue ``total`` jobs ``interval`` apart; return call start and end times."""
        starts = [0.0] * total
        ends = [0.0] * total
        async with system.producer(env.dsn, env.caps) as producer:
            # Let the worker finish starting and begin listening before the first job.
            await asyncio.sleep(env.opts.latency_settle_s)
            pool.check_alive()
            origin = time.monotonic()
            for i in range(total):
                delay = origin + i * interval - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                starts[i] = time.time()
                await producer.enqueue(i)
                ends[i] = time.time()
        return starts, ends

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        return first_figure(same_round, metric, lambda other: other.system == "raw")

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        out = []
        for row in rows:
            status = status_cell(row)
            if status:
                out.append([row.title, row.case.label, status] + [""] * 8)
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
                    fmt_ms(s.get("p50_commit"), spread=False),
                    fmt_ms(s.get("call_p50"), spread=False),
                    fmt_ratio(row.ratios.get("p50/raw")),
                    fmt_ratio(row.ratios.get("p99/raw")),
                    fmt_ratio(row.ratios.get("p50/peer")),
                ]
            )
        return table(
            [
                "system",
                "worker",
                "p50",
                "p95",
                "p99",
                "max",
                "p50 from commit",
                "enqueue call p50",
                "p50 × raw",
                "p99 × raw",
                "p50 × best peer",
            ],
            out,
        )
