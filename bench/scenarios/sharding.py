"""Does sharding pay for itself as claimers grow? pgsched installed with 1 shard vs 8 (the default).

Each claimer is a process with its own connection calling ``pgsched.claim(10)``
and ``pgsched.complete`` in a loop, starting each claim at another shard
(``start_shard`` = its slot, then one further per claim, as the worker
rotates it). The 8-shard install is the system's own database; the 1-shard
one is a sibling database installed with ``pgsched migrate --shards 1`` on
first use.
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
    fmt_rate,
    fmt_ratio,
    status_cell,
    table,
)
from bench.scenarios.drain import measure_drain
from bench.systems import pgsched_sql
from bench.systems.base import Caps, DrainConfig, System

CLAIMERS = (1, 4, 16, 32)
SHARDS = (1, 8)
BATCH = 10


class ShardingScenario(Scenario):
    """Jobs/s at 1, 4, 16 and 32 concurrent SQL claimers, with 1 and with 8 shards."""

    name = "sharding"
    title = "Sharding: 1 vs 8 shards as claimers grow (jobs/s, higher is better)"
    description = "drain with 1-32 concurrent pgsched.claim/complete loops, pgsched installed with 1 and 8 shards"
    primary = "jobs_per_s"
    ratio_metrics = ("jobs_per_s",)
    summary_metrics = ("jobs_per_s",)

    def sizes(self, opts: Options) -> str:
        return (
            f"{opts.sharding_jobs:,} pre-enqueued jobs per drain; each claimer a process with its own connection: "
            f"pgsched.claim({BATCH}) then pgsched.complete, start_shard rotating. *8 ÷ 1*: per round, then the median"
        )

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        if system.name != "pgsched":
            return []
        cases = []
        for claimers in CLAIMERS:
            for shards in SHARDS:
                config = DrainConfig(
                    f"s{shards}x{claimers}",
                    f"{shards} shard{'s' if shards > 1 else ''}",
                    claimers,
                    {"batch": BATCH},
                    claim=str(BATCH),
                )
                cases.append(
                    Case(
                        scenario=self.name,
                        system=system.name,
                        id=config.id,
                        label=config.label,
                        group=f"x{claimers}",
                        params={"config": asdict(config), "shards": shards, "n": opts.sharding_jobs},
                    )
                )
        return cases

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        shards = int(case.params["shards"])
        with db.connect(env.dsn) as conn:
            own = int(db.scalar(conn, "SELECT shards FROM pgsched.config"))
        dsn = env.dsn if shards == own else pgsched_sql.shard_database(env.dsn, shards)
        config = DrainConfig(**case.params["config"])
        return measure_drain(system, env, config, int(case.params["n"]), dsn=dsn, loop=pgsched_sql.LOOP_CLAIM)

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        """The 1-shard install at the same number of claimers."""
        for other, metrics in same_round:
            if other.group == case.group and other.params["shards"] == 1 and metrics.get(metric):
                return float(metrics[metric])
        return None

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        grid: dict[int, dict[int, RowSummary]] = {}
        for row in rows:
            grid.setdefault(int(row.case.params["config"]["processes"]), {})[int(row.case.params["shards"])] = row
        out = []
        for claimers in sorted(grid):
            cells = []
            for shards in SHARDS:
                row = grid[claimers].get(shards)
                cells.append("—" if row is None else status_cell(row) or fmt_rate(row.stats.get("jobs_per_s")))
            eight = grid[claimers].get(8)
            ratio = eight.ratios.get("jobs_per_s/raw") if eight is not None and eight.status == "ok" else None
            out.append([str(claimers), *cells, fmt_ratio(ratio)])
        return table(["claimers", "1 shard: jobs/s", "8 shards: jobs/s", "8 ÷ 1"], out)
