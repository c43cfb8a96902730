"""Enqueue throughput: N no-op jobs one by one (one transaction each) and in batches."""

from __future__ import annotations

import asyncio
from dataclasses import asdict

from bench.harness import db
from bench.harness.options import Options
from bench.scenarios.base import (
    Case,
    CaseEnv,
    Metrics,
    RowSummary,
    Scenario,
    first_figure,
    fmt_rate,
    fmt_ratio,
    status_cell,
    table,
)
from bench.systems.base import Caps, EnqueueVariant, System


class EnqueueScenario(Scenario):
    """Jobs per second an application can enqueue, from a single connection."""

    name = "enqueue"
    title = "Enqueue no-op jobs (jobs/s, higher is better)"
    description = "enqueue N jobs one by one (each its own transaction), in batches, and from plain SQL"
    primary = "jobs_per_s"
    ratio_metrics = ("jobs_per_s",)
    summary_metrics = ("jobs_per_s",)

    def sizes(self, opts: Options) -> str:
        return (
            f"{opts.enqueue_jobs:,} jobs one by one, {opts.enqueue_batch_jobs:,} in batches of {opts.enqueue_batch:,}"
        )

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        cases = []
        for variant in system.enqueue_variants(caps):
            n = opts.enqueue_jobs if variant.batch == 1 else opts.enqueue_batch_jobs
            batch = opts.enqueue_batch if variant.batch > 1 else 1
            variant = EnqueueVariant(variant.id, variant.label, variant.group, batch)
            cases.append(
                Case(
                    scenario=self.name,
                    system=system.name,
                    id=variant.id,
                    label=variant.label.format(batch=f"{batch:,}"),
                    group=variant.group,
                    params={"variant": asdict(variant), "n": n},
                )
            )
        return cases

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        variant = EnqueueVariant(**case.params["variant"])
        n = int(case.params["n"])
        with db.connect(env.dsn) as conn:
            db.reset(conn, system.truncate_tables)
            notes = db.settle(conn, system.truncate_tables)
            seconds = asyncio.run(system.enqueue(env.dsn, variant, n, env.caps))
            queued = int(db.scalar(conn, system.queued_sql))
        if queued != n:
            raise RuntimeError(f"{queued:,} jobs in the database after enqueueing {n:,}")
        return {"jobs_per_s": n / seconds, "seconds": seconds, "jobs": n, "notes": notes}

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        return first_figure(same_round, metric, lambda other: other.system == "raw" and other.group == case.group)

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        out = []
        for row in rows:
            n = int(row.case.params["n"])
            status = status_cell(row)
            out.append(
                [
                    row.title,
                    row.case.label,
                    f"{n:,}",
                    status or fmt_rate(row.stats.get("jobs_per_s")),
                    "" if status else fmt_ratio(row.ratios.get("jobs_per_s/raw")),
                    "" if status else fmt_ratio(row.ratios.get("jobs_per_s/peer")),
                ]
            )
        return table(["system", "variant", "jobs", "jobs/s median [min–max]", "× raw", "× best peer"], out)
