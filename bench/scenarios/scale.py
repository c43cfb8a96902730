"""Claims never scan jobs that are not due: claim latency and drain rate beside a large backlog.

Three tables for pgsched, rebuilt in every round:

- *empty*: nothing but the jobs being measured;
- *far-future*: N jobs due in about a month in pgsched.jobs (``pgsched.enqueue_many``
  in chunks of 50,000), then ``VACUUM ANALYZE``;
- *history*: N completed jobs in pgsched.job_history (one set-based INSERT as
  the table owner, finished over the last day), then ``VACUUM ANALYZE``.

On each: (1) one connection times ``SELECT … FROM pgsched.claim(…, n => 10, …)``
calls against a steady supply of due jobs (each claim's jobs are then completed,
untimed; the first 20 claims are a warm-up), first with ``start_shard`` rotating
(what a busy worker passes) and then NULL (one pass over all shards, what an
idle worker passes), and times ``pgsched.promote_due()``
and ``pgsched.next_due()``, which the scanner and idle workers call; (2) the
``pgsched worker`` drains N' due jobs at its defaults and at concurrency 100.
Ratios are against the empty table of the same round.

PgQueuer (asyncpg), Oban for Python and DBOS get the far-future backlog too
(PgQueuer: ``execute_after`` of 30 days; Oban: the rows its insert writes for
a job due in 30 days, inserted set-based, as its ``enqueue_many`` writes one
row per statement; DBOS: ``delay_seconds`` of 30 days), drained at their
default configuration.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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

BACKLOGS = {
    "none": "empty",
    "scheduled": "{n} far-future jobs in pgsched.jobs",
    "history": "{n} finished jobs in pgsched.job_history",
}
PEER_BACKLOGS = {"none": "empty", "scheduled": "{n} far-future jobs ({how})"}
#: Peers that get the far-future backlog (cheap to build for them), and how it is built.
PEERS = {
    "pgqueuer": "execute_after 30 days",
    "oban": "state scheduled, due in 30 days, inserted set-based",
    "dbos": "delay_seconds 30 days",
}
WARMUP_CLAIMS = 20
PROMOTE_CALLS = 50

UNFINISHED_DUE = (
    "SELECT EXISTS (SELECT 1 FROM pgsched.jobs WHERE state = 'available')"
    " OR EXISTS (SELECT 1 FROM pgsched.jobs WHERE state = 'running')"
)
FINISHED_NOOP = "SELECT count(*) FROM pgsched.job_history WHERE task = 'noop' AND state = 'completed'"
DRAINS = {
    "jobs_per_s": DrainConfig("defaults", "pgsched worker (defaults)", 1, {"args": []}),
    "jobs_per_s_c100": DrainConfig("c100", "pgsched worker --concurrency 100", 1, {"args": ["--concurrency", "100"]}),
}


def _claims(conn: Any, claims: int, *, rotate: bool) -> tuple[list[float], list[float]]:
    """Milliseconds of ``claims`` timed claims of 10 (after the warm-up) and of the completions that follow."""
    claim_times, complete_times = [], []
    for k in range(claims + WARMUP_CLAIMS):
        t0 = time.perf_counter()
        rows = conn.execute(pgsched_sql.CLAIM, ("bench-scale", 10, k if rotate else None), prepare=True).fetchall()
        t1 = time.perf_counter()
        if len(rows) != 10:
            raise RuntimeError(f"claim {k} returned {len(rows)} jobs, expected 10")
        ids, tokens, shards = (list(column) for column in zip(*rows, strict=True))
        conn.execute(pgsched_sql.COMPLETE, (ids, tokens, shards), prepare=True).fetchone()
        t2 = time.perf_counter()
        if k >= WARMUP_CLAIMS:
            claim_times.append((t1 - t0) * 1000.0)
            complete_times.append((t2 - t1) * 1000.0)
    return claim_times, complete_times


def _timed(conn: Any, query: str, params: tuple[Any, ...], calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        conn.execute(query, params, prepare=True).fetchall()
        times.append((time.perf_counter() - started) * 1000.0)
    return times


class ScaleScenario(Scenario):
    """Claim latency and drain rate with an empty table, a far-future backlog and a large history."""

    name = "scale"
    title = "Scale: claim latency and drain rate beside a large backlog (ratios against the empty table)"
    description = "claim p50/p99 and drain jobs/s with 0 vs 1,000,000 far-future jobs, and 1,000,000 finished jobs"
    primary = "claim_p50"
    higher_is_better = False
    ratio_metrics = ("claim_p50", "claim_p99", "claim_all_p50", "jobs_per_s", "jobs_per_s_c100")
    summary_metrics = (
        "claim_p50",
        "claim_p95",
        "claim_p99",
        "claim_max",
        "claim_all_p50",
        "claim_all_p99",
        "complete_p50",
        "complete_p99",
        "promote_p50",
        "next_due_p50",
        "jobs_per_s",
        "jobs_per_s_c100",
        "build_s",
    )

    def sizes(self, opts: Options) -> str:
        return (
            f"backlog {opts.backlog_jobs:,} rows; {opts.scale_claims:,} timed claims of 10 from one connection "
            f"(after {WARMUP_CLAIMS} warm-up claims), {PROMOTE_CALLS} timed promote_due()/next_due() calls; drains "
            f"of {opts.scale_drain_jobs:,} jobs by one worker process. *× empty*: per round, against the empty table"
        )

    def progress(self, metrics: Metrics) -> str:
        if "claim_p50" not in metrics:
            return f"drain {metrics['jobs_per_s']:,.0f} jobs/s"
        return (
            f"claim p50 {metrics['claim_p50']:.2f} ms  p99 {metrics['claim_p99']:.2f} ms  "
            f"drain {metrics['jobs_per_s']:,.0f} / {metrics['jobs_per_s_c100']:,.0f} jobs/s"
        )

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        if system.name == "pgsched":
            backlogs = BACKLOGS
        elif system.name in PEERS:
            backlogs = PEER_BACKLOGS
        else:
            return []
        n = f"{opts.backlog_jobs:,}"
        return [
            Case(
                scenario=self.name,
                system=system.name,
                id=backlog,
                label=label.format(n=n, how=PEERS.get(system.name, "")),
                group=system.name,
                params={"backlog": backlog, "n": opts.backlog_jobs},
            )
            for backlog, label in backlogs.items()
        ]

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        if system.name != "pgsched":
            return self._run_peer(case, system, env)
        opts = env.opts
        backlog, n = case.params["backlog"], int(case.params["n"])
        metrics: Metrics = {"notes": []}
        with db.connect(env.dsn) as conn:
            db.reset(conn, system.truncate_tables)
            started = time.perf_counter()
            if backlog == "scheduled":
                pgsched_sql.add_far_future(conn, n)
            elif backlog == "history":
                pgsched_sql.add_history(conn, n)
            conn.execute("VACUUM ANALYZE pgsched.jobs")
            conn.execute("VACUUM ANALYZE pgsched.job_history")
            metrics["build_s"] = time.perf_counter() - started

            # (1) Claim latency against a steady supply of due jobs: first with start_shard
            # rotating (one shard per statement, what a busy worker does), then NULL (one pass
            # over all shards, what an idle worker does).
            claims = opts.scale_claims
            asyncio.run(system.prefill(env.dsn, 2 * (claims + WARMUP_CLAIMS) * 10, env.caps))
            metrics["notes"] += db.settle(conn, ("pgsched.jobs",))
            claim_times, complete_times = _claims(conn, claims, rotate=True)
            all_shards, _ = _claims(conn, claims, rotate=False)
            promote = _timed(conn, "SELECT pgsched.promote_due()", (), PROMOTE_CALLS)
            next_due = _timed(conn, "SELECT pgsched.next_due()", (), PROMOTE_CALLS)
            metrics |= {
                "claim_p50": percentile(claim_times, 50),
                "claim_p95": percentile(claim_times, 95),
                "claim_p99": percentile(claim_times, 99),
                "claim_max": max(claim_times),
                "claim_all_p50": percentile(all_shards, 50),
                "claim_all_p99": percentile(all_shards, 99),
                "complete_p50": percentile(complete_times, 50),
                "complete_p99": percentile(complete_times, 99),
                "promote_p50": percentile(promote, 50),
                "next_due_p50": percentile(next_due, 50),
            }
            left = int(db.scalar(conn, "SELECT count(*) FROM pgsched.jobs WHERE task = 'backlog'"))
            if backlog == "scheduled" and left != n:
                raise RuntimeError(f"{left:,} of {n:,} far-future jobs left after the claims")

        # (2) Drain rate, the backlog staying in place.
        for metric, config in DRAINS.items():
            drained = measure_drain(
                system,
                env,
                config,
                opts.scale_drain_jobs,
                reset=False,
                tables=("pgsched.jobs",),
                unfinished_sql=UNFINISHED_DUE,
                finished_sql=FINISHED_NOOP,
            )
            metrics[metric] = drained["jobs_per_s"]
        return metrics

    def _run_peer(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        """A peer's default drain with or without the far-future backlog."""
        backlog, n = case.params["backlog"], int(case.params["n"])
        config = next(c for c in system.drain_configs(env.caps) if c.default)
        with db.connect(env.dsn) as conn:
            db.reset(conn, system.truncate_tables)
            started = time.perf_counter()
            if backlog == "scheduled":
                asyncio.run(system.prefill_far_future(env.dsn, n, env.caps))
            build_s = time.perf_counter() - started
            for name in system.truncate_tables:
                conn.execute(f"VACUUM ANALYZE {name}")
        drained = measure_drain(
            system,
            env,
            config,
            env.opts.scale_drain_jobs,
            reset=False,
            unfinished_sql=system.unfinished_due_sql,
        )
        return {"jobs_per_s": drained["jobs_per_s"], "build_s": build_s, "notes": drained["notes"]}

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        """The same system's empty table in the same round."""
        return first_figure(
            same_round, metric, lambda other: other.system == case.system and other.params["backlog"] == "none"
        )

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
                    _cell(row, "claim_p50", fmt_ms),
                    _cell(row, "claim_p99", fmt_ms),
                    _cell(row, "claim_all_p50", fmt_ms) + " / " + _cell(row, "claim_all_p99", fmt_ms)
                    if "claim_all_p50" in s
                    else "—",
                    _cell(row, "complete_p50", fmt_ms),
                    _cell(row, "promote_p50", fmt_ms) + " / " + _cell(row, "next_due_p50", fmt_ms)
                    if "promote_p50" in s
                    else "—",
                    _cell(row, "jobs_per_s", fmt_rate),
                    _cell(row, "jobs_per_s_c100", fmt_rate),
                    "" if row.case.params["backlog"] == "none" else f"{s['build_s'][0]:.0f} s",
                ]
            )
        return table(
            [
                "system",
                "table",
                "claim(10) p50 ms (× empty)",
                "claim p99 ms (× empty)",
                "claim(10), start_shard NULL: p50 / p99 ms",
                "complete p50 ms",
                "promote_due / next_due p50 ms",
                "drain jobs/s, defaults (× empty)",
                "drain jobs/s, concurrency 100 (× empty)",
                "backlog build",
            ],
            out,
        )


def _cell(row: RowSummary, metric: str, fmt: Callable[[tuple[float, float, float] | None], str]) -> str:
    """A figure with its ratio to the empty table (for the rows that have a backlog)."""
    if metric not in row.stats:
        return "—"
    text = fmt(row.stats[metric])
    ratio = row.ratios.get(f"{metric}/raw")
    if row.case.params["backlog"] != "none" and ratio is not None:
        text += f" ({fmt_ratio(ratio)})"
    return text
