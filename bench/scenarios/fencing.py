"""What the promises cost at the SQL level: pgsched.claim + pgsched.complete vs a plain claim + DELETE.

Both loops drain the same number of pre-enqueued jobs with the same batch
size and number of processes, one connection each, one autocommit statement
per claim and per completion (see bench/systems/pgsched_sql.py). pgsched's
loop pays for fencing tokens, leases, the move to the day-partitioned
history and two audit events per job; the plain loop runs on a table of the
same shape (columns, shard partitions, indexes, checks) with functions of
the same shape, and only flips the state and then deletes the row.
"""

from __future__ import annotations

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
from bench.scenarios.drain import measure_drain
from bench.systems import pgsched_sql
from bench.systems.base import Caps, DrainConfig, System

VARIANTS = {
    "fenced": "pgsched.claim + pgsched.complete (fenced; history + audit)",
    "plain": "plain claim + DELETE, pgsched-shaped table",
}


class FencingScenario(Scenario):
    """Jobs/s of the fenced SQL loop and of the plain one, per batch size and process count."""

    name = "fencing"
    title = "Cost of the promises at the SQL level: fenced vs plain claim/complete loop (jobs/s, higher is better)"
    description = "drain with pgsched.claim + pgsched.complete vs a plain claim + DELETE on a pgsched-shaped table"
    primary = "jobs_per_s"
    ratio_metrics = ("jobs_per_s",)
    summary_metrics = ("jobs_per_s",)

    def sizes(self, opts: Options) -> str:
        return (
            f"{opts.fencing_jobs:,} pre-enqueued jobs per drain; each process: claim n, then complete the n, "
            "one autocommit statement each. *fenced ÷ plain*: per round, then the median"
        )

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        if system.name != "pgsched":
            return []
        processes = (1,) if opts.quick else (1, 4)
        cases = []
        for batch in (10, 100):
            for procs in processes:
                for variant, label in VARIANTS.items():
                    config = DrainConfig(
                        f"{variant}-b{batch}x{procs}", label, procs, {"batch": batch}, claim=str(batch)
                    )
                    cases.append(
                        Case(
                            scenario=self.name,
                            system=system.name,
                            id=config.id,
                            label=label,
                            group=f"b{batch}x{procs}",
                            params={"config": asdict(config), "variant": variant, "n": opts.fencing_jobs},
                        )
                    )
        return cases

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        config = DrainConfig(**case.params["config"])
        n = int(case.params["n"])
        if case.params["variant"] == "fenced":
            return measure_drain(system, env, config, n, loop=pgsched_sql.LOOP_CLAIM)
        with db.connect(env.dsn) as conn:
            pgsched_sql.install_plain(conn)

            def prefill() -> None:
                pgsched_sql.prefill_plain(conn, n)

            return measure_drain(
                system,
                env,
                config,
                n,
                loop=pgsched_sql.LOOP_PLAIN,
                prefill=prefill,
                tables=("bench_plain.jobs",),
                unfinished_sql=pgsched_sql.PLAIN_UNFINISHED,
                finished_sql=pgsched_sql.PLAIN_FINISHED,
            )

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        """The plain loop of the same batch size and process count."""
        return first_figure(
            same_round, metric, lambda other: other.group == case.group and other.params["variant"] == "plain"
        )

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        out = []
        for row in rows:
            status = status_cell(row)
            config = row.case.params["config"]
            out.append(
                [
                    row.case.label,
                    str(config["settings"]["batch"]),
                    str(config["processes"]),
                    status or fmt_rate(row.stats.get("jobs_per_s")),
                    ""
                    if status or row.case.params["variant"] == "plain"
                    else fmt_ratio(row.ratios.get("jobs_per_s/raw")),
                ]
            )
        return table(["loop", "batch", "procs", "jobs/s median [min–max]", "fenced ÷ plain"], out)
