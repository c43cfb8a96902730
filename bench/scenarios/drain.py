"""Drain throughput: N pre-enqueued no-op jobs, from worker start until all are finished and persisted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict

from bench.harness import cpu, db
from bench.harness.options import Options
from bench.harness.workers import WorkerPool
from bench.scenarios.base import (
    Case,
    CaseEnv,
    Metrics,
    RowSummary,
    Scenario,
    fmt_rate,
    fmt_ratio,
    status_cell,
    table,
)
from bench.systems.base import Caps, DrainConfig, System


def _group(n: int, processes: int) -> str:
    return f"{n}:{'1' if processes == 1 else 'n'}"


def measure_drain(
    system: System,
    env: CaseEnv,
    config: DrainConfig,
    n: int,
    *,
    dsn: str | None = None,
    loop: str | None = None,
    prefill: Callable[[], None] | None = None,
    reset: bool = True,
    tables: tuple[str, ...] | None = None,
    unfinished_sql: str | None = None,
    finished_sql: str | None = None,
) -> Metrics:
    """Empty the tables, pre-enqueue ``n`` jobs, then time ``config``'s workers until all are finished and persisted.

    The other scenarios reuse this with another database (``dsn``), a plain
    SQL loop instead of the system's worker (``loop``), their own pre-fill or
    tables (``reset=False`` keeps what the tables hold), and their own SQL for "anything unfinished?" (a far-future
    backlog stays in the table) and "how many finished?" (counted as the
    increase over the drain).
    """
    dsn = dsn or env.dsn
    tables = system.truncate_tables if tables is None else tables
    finished_sql = finished_sql or system.finished_sql
    timeout = max(300.0, n / 40.0)
    with db.connect(dsn) as conn:
        if reset:
            db.reset(conn, tables)
        if prefill is None:
            asyncio.run(system.prefill(dsn, n, env.caps))
        else:
            prefill()
        notes = db.settle(conn, tables)
        finished_before = int(db.scalar(conn, finished_sql))
        pool = WorkerPool(system.name, dsn, config, env.caps, env.work_dir, loop=loop)
        try:
            pool.start()
            cpu_before = cpu.sample()
            started = pool.go()
            deadline = started + timeout
            polls = 0
            while pool.done() < n:
                time.sleep(0.001)
                polls += 1
                if polls % 50 == 0:
                    pool.check_alive()
                    if time.perf_counter() > deadline:
                        raise TimeoutError(f"{pool.done():,} of {n:,} jobs handled after {timeout:.0f} s")
            handled = time.perf_counter()
            # Handlers ran; now wait until the database shows every job finished.
            while db.scalar(conn, unfinished_sql or system.unfinished_sql):
                time.sleep(0.005)
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"jobs still unfinished in the database after {timeout:.0f} s")
            finished_at = time.perf_counter()
            cpu_after = cpu.sample()
            hits = pool.done()
        finally:
            pool.stop()
        finished = int(db.scalar(conn, finished_sql)) - finished_before
    if finished != n:
        raise RuntimeError(f"{finished:,} jobs recorded as finished, expected {n:,}")
    seconds = finished_at - started
    if hits != n:
        notes.append(f"handlers ran {hits:,} times for {n:,} jobs")
    machine = cpu.busy(cpu_before, cpu_after)
    return {
        "jobs_per_s": n / seconds,
        # every core's busy time, over the jobs: what more processes cannot make smaller
        **({} if machine is None else {"busy_pct": machine[0] * 100.0, "cpu_us_per_job": machine[1] * 1e6 / n}),
        "seconds": seconds,
        "tail_ms": (finished_at - handled) * 1000.0,
        "jobs": n,
        "processes": config.processes,
        "concurrency": config.concurrency,
        "claim": config.claim,
        "notes": notes,
    }


def _cpu_cell(row: RowSummary) -> str:
    """The machine's busy core-microseconds per job and how busy its cores were (medians over rounds)."""
    if "cpu_us_per_job" not in row.stats or "busy_pct" not in row.stats:
        return "—"
    return f"{row.stats['cpu_us_per_job'][0]:.0f} ({row.stats['busy_pct'][0]:.0f} %)"


class DrainScenario(Scenario):
    """Jobs per second a system's workers finish, queue pre-filled, clock from worker start."""

    name = "drain"
    title = "Drain pre-enqueued no-op jobs (jobs/s, higher is better)"
    description = "drain N pre-enqueued jobs at 1 and several worker processes, until the database says all are done"
    primary = "jobs_per_s"
    ratio_metrics = ("jobs_per_s",)
    summary_metrics = ("jobs_per_s", "tail_ms", "cpu_us_per_job", "busy_pct")

    def sizes(self, opts: Options) -> str:
        big = f" and {opts.big_drain_jobs:,}" if opts.big else ""
        return (
            f"{opts.drain_jobs:,}{big} pre-enqueued jobs. *concurrency*: handlers running at once in one process; "
            "*claim*: most jobs one claim takes; *CPU µs/job*: every core's busy time on the machine (the database, "
            "the workers, the harness) over the drain, per job: a system that leaves cores idle is bound by its "
            "round trips, one whose cores are all busy by this cost, which more processes cannot lower"
        )

    def progress_label(self, case: Case) -> str:
        return f"{case.label[:38]} ×{case.params['config']['processes']}"

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        cases = []
        for config in system.drain_configs(caps):
            if opts.quick and not config.quick:
                continue
            sizes = [opts.drain_jobs]
            if opts.big and config.big:
                sizes.append(opts.big_drain_jobs)
            for n in sizes:
                label = config.label + (" (defaults)" if config.default else "")
                cases.append(
                    Case(
                        scenario=self.name,
                        system=system.name,
                        id=f"{config.id}@{n}",
                        label=label,
                        group=_group(n, config.processes),
                        params={"config": asdict(config), "n": n},
                    )
                )
        return cases

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        return measure_drain(system, env, DrainConfig(**case.params["config"]), int(case.params["n"]))

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        """The ceiling: the best raw-SQL configuration of the same size in the same round."""
        n = case.params["n"]
        values = [
            float(m[metric])
            for c, m in same_round
            if c.system == "raw" and c.params.get("n") == n and m.get(metric) is not None
        ]
        return max(values) if values else None

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        lines: list[str] = []
        sizes = sorted({int(r.case.params["n"]) for r in rows})
        for n in sizes:
            if len(sizes) > 1:
                lines += ([""] if lines else []) + [f"**{n:,} jobs**", ""]
            out = []
            for row in rows:
                if int(row.case.params["n"]) != n:
                    continue
                status = status_cell(row)
                processes = int(row.case.params["config"]["processes"])
                config = row.case.params["config"]
                out.append(
                    [
                        row.title,
                        row.case.label,
                        str(processes),
                        config.get("concurrency") or "—",
                        config.get("claim") or "—",
                        status or fmt_rate(row.stats.get("jobs_per_s")),
                        "" if status else fmt_ratio(row.ratios.get("jobs_per_s/raw")),
                        "" if status else fmt_ratio(row.ratios.get("jobs_per_s/peer")),
                        "" if status or "tail_ms" not in row.stats else f"{row.stats['tail_ms'][0]:.0f}",
                        "" if status else _cpu_cell(row),
                    ]
                )
            lines += table(
                [
                    "system",
                    "configuration",
                    "procs",
                    "concurrency",
                    "claim",
                    "jobs/s median [min–max]",
                    "× raw ceiling",
                    "× best peer (same procs)",
                    "persist tail ms",
                    "CPU µs/job (cores busy)",
                ],
                out,
            )
        return lines
