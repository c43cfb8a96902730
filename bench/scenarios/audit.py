"""Audit events on vs off: the same drains with ``UPDATE pgsched.config SET audit = false``.

pgsched records in ``pgsched.job_events`` the transitions a job's row cannot
tell (failures, retries, snoozes, expiries, cancels, hand-backs) while
``config.audit`` is on, its default; the claim and completion of a job that
succeeds are read from its history row (``pgsched.job_timeline``), so a drain
of no-op jobs writes no event either way. Each configuration
drains the same jobs with audit on and with audit off, in the same round; the
setting is put back on afterwards, whatever happens.
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

CONFIGS = (
    DrainConfig("worker-c10", "pgsched worker, concurrency 10 (defaults)", 1, {"args": []}, concurrency="10"),
    DrainConfig(
        "worker-c100", "pgsched worker, concurrency 100", 1, {"args": ["--concurrency", "100"]}, concurrency="100"
    ),
    DrainConfig("sql-b100", "SQL loop: pgsched.claim(100) + pgsched.complete", 1, {"batch": 100}, claim="100"),
)


class AuditScenario(Scenario):
    """Jobs/s with audit events on and off."""

    name = "audit"
    title = "Audit events on vs off (drain jobs/s, higher is better)"
    description = "drain with pgsched.config.audit on and off, same configuration"
    primary = "jobs_per_s"
    ratio_metrics = ("jobs_per_s",)
    summary_metrics = ("jobs_per_s",)

    def sizes(self, opts: Options) -> str:
        return (
            f"{opts.audit_jobs:,} pre-enqueued jobs per drain. *on ÷ off*: per round, then the median (target ≥ 0.7×)"
        )

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        if system.name != "pgsched":
            return []
        return [
            Case(
                scenario=self.name,
                system=system.name,
                id=f"{config.id}-{'on' if audit else 'off'}",
                label=config.label,
                group=config.id,
                params={"config": asdict(config), "audit": audit, "n": opts.audit_jobs},
            )
            for config in CONFIGS
            for audit in (True, False)
        ]

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        config = DrainConfig(**case.params["config"])
        audit = bool(case.params["audit"])
        with db.connect(env.dsn) as conn:
            conn.execute("UPDATE pgsched.config SET audit = %s", (audit,))
            try:
                loop = pgsched_sql.LOOP_CLAIM if "batch" in config.settings else None
                metrics = measure_drain(system, env, config, int(case.params["n"]), loop=loop)
                events = int(db.scalar(conn, "SELECT count(*) FROM pgsched.job_events"))
            finally:
                conn.execute("UPDATE pgsched.config SET audit = true")
        metrics["events"] = events
        return metrics

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        """The same configuration with audit off."""
        return first_figure(same_round, metric, lambda other: other.group == case.group and not other.params["audit"])

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        by_group: dict[str, dict[bool, RowSummary]] = {}
        for row in rows:
            by_group.setdefault(row.case.group, {})[bool(row.case.params["audit"])] = row
        out = []
        for pair in by_group.values():
            on, off = pair.get(True), pair.get(False)
            label = (on or off).case.label if (on or off) else "?"  # type: ignore[union-attr]

            def cell(row: RowSummary | None) -> str:
                if row is None:
                    return "—"
                return status_cell(row) or fmt_rate(row.stats.get("jobs_per_s"))

            ratio = on.ratios.get("jobs_per_s/raw") if on is not None and on.status == "ok" else None
            verdict = "" if ratio is None else (" ✓" if ratio >= 0.7 else " ✗ (target ≥ 0.7×)")
            out.append([label, cell(on), cell(off), fmt_ratio(ratio) + verdict])
        return table(["configuration", "audit on: jobs/s", "audit off: jobs/s", "on ÷ off"], out)
