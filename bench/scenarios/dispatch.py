"""What dispatch policies cost: drains and claim latency with aging, tenant fairness, a concurrency and a rate limit.

One case per policy of queue 'default' (``pgsched.configure_queue``), each
against the case without a policy in the same round:

- *none*: strict priority, no limits (the reference);
- *aging*: ``aging => 1 s`` (the claim order is stamped at enqueue);
- *fairness*: ``tenant_fairness`` with the jobs spread over 100 tenants;
- *concurrency*: ``concurrency => 10000`` (never reached: the cost of
  counting leases under the queue's lock, not of waiting for a slot);
- *rate*: ``rate => 10000, rate_period => 1 s`` (above what the drain
  reaches: the cost of the sliding window);
- *all*: every one of them at once.

Each case (1) drains N jobs with one ``pgsched worker --concurrency 100``
process, and (2) times claims of 10 from one connection against a steady
supply of due jobs (start_shard rotating, as a busy worker claims) beside
the scale scenario's far-future backlog, built once per round and kept
between the cases.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.harness import db
from bench.harness.options import Options
from bench.scenarios.base import (
    Case,
    CaseEnv,
    Metrics,
    RowSummary,
    Scenario,
    first_figure,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    percentile,
    status_cell,
    table,
)
from bench.scenarios.drain import measure_drain
from bench.systems import pgsched_sql
from bench.systems.base import Caps, DrainConfig, System

TENANTS = 100
WARMUP_CLAIMS = 20
POLICIES: dict[str, tuple[str, str]] = {
    "none": ("no policy (strict priority)", ""),
    "aging": ("aging 1 s", "aging => interval '1 second'"),
    "fairness": (f"tenant fairness, {TENANTS} tenants", "tenant_fairness => true"),
    "concurrency": ("concurrency limit 10,000", "concurrency => 10000"),
    "rate": ("rate limit 10,000/s", "rate => 10000, rate_period => interval '1 second'"),
    "all": (
        "all four",
        "aging => interval '1 second', tenant_fairness => true, concurrency => 10000, rate => 10000,"
        " rate_period => interval '1 second'",
    ),
}
CONFIGURE = {key: f"SELECT pgsched.configure_queue('default', {args})" for key, (_, args) in POLICIES.items() if args}
CLEAR = "SELECT pgsched.configure_queue('default', p_clear => '{all}')"
SPREAD_TENANTS = (
    f"UPDATE pgsched.jobs SET tenant = 'tenant-' || (id % {TENANTS}) WHERE task = 'noop' AND tenant IS NULL"
)
UNFINISHED_DUE = (
    "SELECT EXISTS (SELECT 1 FROM pgsched.jobs WHERE state = 'available')"
    " OR EXISTS (SELECT 1 FROM pgsched.jobs WHERE state = 'running')"
)
FINISHED_NOOP = "SELECT count(*) FROM pgsched.job_history WHERE task = 'noop' AND state = 'completed'"
DRAIN = DrainConfig("c100", "pgsched worker --concurrency 100", 1, {"args": ["--concurrency", "100"]})


def _claims(conn: Any, claims: int) -> tuple[list[float], int]:
    """Milliseconds of ``claims`` timed claims of 10 (after the warm-up), each one's jobs completed untimed."""
    times, short = [], 0
    for k in range(claims + WARMUP_CLAIMS):
        t0 = time.perf_counter()
        rows = conn.execute(pgsched_sql.CLAIM, ("bench-dispatch", 10, k), prepare=True).fetchall()
        t1 = time.perf_counter()
        if len(rows) < 10:
            short += 1
        if rows:
            ids, tokens, shards = (list(column) for column in zip(*rows, strict=True))
            conn.execute(pgsched_sql.COMPLETE, (ids, tokens, shards), prepare=True).fetchone()
        if k >= WARMUP_CLAIMS:
            times.append((t1 - t0) * 1000.0)
    return times, short


class DispatchScenario(Scenario):
    """Drain rate and claim latency under each dispatch policy, against no policy."""

    name = "dispatch"
    title = "Dispatch policies: drain and claim latency with each policy on (ratios against no policy)"
    description = "drain jobs/s and claim p50/p99 with aging, 100-tenant fairness, a concurrency and a rate limit"
    primary = "jobs_per_s"
    higher_is_better = True
    ratio_metrics = ("jobs_per_s", "claim_p50", "claim_p99")
    summary_metrics = ("jobs_per_s", "claim_p50", "claim_p95", "claim_p99", "claim_max", "short_claims")

    def sizes(self, opts: Options) -> str:
        return (
            f"drains of {opts.scale_drain_jobs:,} jobs by one worker process (concurrency 100); "
            f"{opts.scale_claims:,} timed claims of 10 beside {opts.backlog_jobs:,} far-future jobs. "
            "*× none*: per round, against the case without a policy"
        )

    def progress(self, metrics: Metrics) -> str:
        return (
            f"drain {metrics['jobs_per_s']:,.0f} jobs/s  claim p50 {metrics['claim_p50']:.2f} ms"
            f"  p99 {metrics['claim_p99']:.2f} ms"
        )

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        if system.name != "pgsched":
            return []
        return [
            Case(scenario=self.name, system=system.name, id=key, label=label, group=system.name, params={"policy": key})
            for key, (label, _) in POLICIES.items()
        ]

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        opts = env.opts
        policy = case.params["policy"]
        metrics: Metrics = {"notes": []}
        with db.connect(env.dsn) as conn:
            conn.execute("DELETE FROM pgsched.jobs WHERE task <> 'backlog'")
            conn.execute(CLEAR)
            if int(db.scalar(conn, "SELECT count(*) FROM pgsched.jobs WHERE task = 'backlog'")) != opts.backlog_jobs:
                db.reset(conn, system.truncate_tables)
                pgsched_sql.add_far_future(conn, opts.backlog_jobs)
                conn.execute("VACUUM ANALYZE pgsched.jobs")
            if policy in CONFIGURE:
                conn.execute(CONFIGURE[policy])
            # Aging and fairness re-stamp the queue's waiting rows (the backlog too): vacuum
            # the old versions away, untimed, as autovacuum would.
            conn.execute("VACUUM ANALYZE pgsched.jobs")

            def prefill(n: int) -> None:
                asyncio.run(system.prefill(env.dsn, n, env.caps))
                if policy in ("fairness", "all"):
                    conn.execute(SPREAD_TENANTS)

            # (1) Drain, the backlog in place.
            drained = measure_drain(
                system,
                env,
                DRAIN,
                opts.scale_drain_jobs,
                prefill=lambda: prefill(opts.scale_drain_jobs),
                reset=False,
                tables=("pgsched.jobs",),
                unfinished_sql=UNFINISHED_DUE,
                finished_sql=FINISHED_NOOP,
            )
            metrics["jobs_per_s"] = drained["jobs_per_s"]
            metrics["notes"] += drained.get("notes", [])

            # (2) Claim latency against a steady supply of due jobs.
            prefill(2 * (opts.scale_claims + WARMUP_CLAIMS) * 10)
            metrics["notes"] += db.settle(conn, ("pgsched.jobs",))
            times, short = _claims(conn, opts.scale_claims)
            metrics |= {
                "claim_p50": percentile(times, 50),
                "claim_p95": percentile(times, 95),
                "claim_p99": percentile(times, 99),
                "claim_max": max(times),
                "short_claims": float(short),
            }
            conn.execute("DELETE FROM pgsched.jobs WHERE task <> 'backlog'")
            conn.execute(CLEAR)
        return metrics

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        """The case without a policy in the same round."""
        return first_figure(
            same_round, metric, lambda other: other.system == case.system and other.params["policy"] == "none"
        )

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        out = []
        for row in rows:
            status = status_cell(row)
            if status:
                out.append([row.case.label, status, "", "", ""])
                continue

            out.append(
                [
                    row.case.label,
                    _cell(row, "jobs_per_s", fmt_rate),
                    _cell(row, "claim_p50", fmt_ms),
                    _cell(row, "claim_p99", fmt_ms),
                    f"{row.stats['short_claims'][0]:.0f}" if "short_claims" in row.stats else "—",
                ]
            )
        return table(
            [
                "policy on queue 'default'",
                "drain jobs/s, concurrency 100 (× none)",
                "claim(10) p50 ms (× none)",
                "claim(10) p99 ms (× none)",
                "short claims",
            ],
            out,
        )


def _cell(row: RowSummary, metric: str, fmt: Any) -> str:
    """A figure with its ratio to the case without a policy."""
    if metric not in row.stats:
        return "—"
    text = str(fmt(row.stats[metric]))
    ratio = row.ratios.get(f"{metric}/raw")
    if row.case.params["policy"] != "none" and ratio is not None:
        text += f" ({fmt_ratio(ratio)})"
    return text
