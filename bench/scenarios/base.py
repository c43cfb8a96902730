"""What a scenario is: the cases it asks of each system, how one case is measured, how its table reads.

A *case* is one row of a scenario's table for one system (an enqueue variant,
a drain configuration ...). The orchestrator runs every case once per round,
each in a fresh subprocess, and hands the per-round metrics back to the
scenario to compute ratios and render its table.
"""

from __future__ import annotations

import abc
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.options import Options
from bench.systems.base import Caps, System

Metrics = dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One row: a system, a variant or configuration, and the parameters the run needs."""

    scenario: str
    system: str
    id: str
    label: str
    #: Rows of one group are compared with each other (best peer, raw reference).
    group: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Unique name of the case within a run."""
        return f"{self.scenario}/{self.system}/{self.id}"


@dataclass(frozen=True)
class CaseEnv:
    """Where and with what a case runs (inside the measurement subprocess)."""

    dsn: str
    opts: Options
    caps: Caps
    work_dir: Path


@dataclass
class RowSummary:
    """A case over all rounds: medians, ranges and ratios, ready to render."""

    case: Case
    role: str
    title: str
    status: str
    reason: str = ""
    #: metric -> (median, min, max) over the rounds that succeeded.
    stats: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    #: "<metric>/raw" or "<metric>/peer" -> median over rounds of the per-round ratio.
    ratios: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rounds_ok: int = 0
    #: The metrics of every round that succeeded (for tables that show more than medians).
    results: list[Metrics] = field(default_factory=list)


class Scenario(abc.ABC):
    """A measurement, repeated for every system and round."""

    name: str
    title: str
    #: One line for ``--list`` and the README.
    description: str
    #: Metric that ranks rows and feeds the ratio columns.
    primary: str
    higher_is_better: bool = True
    #: Metrics that get a "x raw" and a "x best peer" ratio.
    ratio_metrics: tuple[str, ...] = ()
    #: Metrics summarised as median [min-max].
    summary_metrics: tuple[str, ...] = ()
    #: Long scenarios run only when named (``--only``), with ``--long``, or at their ``--quick`` size.
    long: bool = False
    #: Run in this many rounds at most (a time series is one long measurement, not a sample).
    max_rounds: int | None = None

    def sizes(self, opts: Options) -> str:
        """The sentence under the table's title: how much work each measurement does."""
        return self.description

    def progress(self, metrics: Metrics) -> str:
        """One line for the progress log."""
        if "jobs_per_s" in metrics:
            return f"{metrics['jobs_per_s']:>9,.0f} jobs/s"
        return ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, float))[:100]

    def progress_label(self, case: Case) -> str:
        """How the progress log names a case."""
        return case.label if self.name in ("enqueue", "latency") else f"{case.id}: {case.label}"

    def timeout_s(self, opts: Options) -> float:
        """How long one measurement may take before the orchestrator gives up on it."""
        return opts.case_timeout_s

    @abc.abstractmethod
    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        """The rows ``system`` contributes to this scenario."""

    @abc.abstractmethod
    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        """Measure one case once; runs in a fresh subprocess of the benchmark venv."""

    @abc.abstractmethod
    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        """The raw-SQL figure ``case``'s ``metric`` is divided by, from the same round."""

    @abc.abstractmethod
    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        """Markdown lines of this scenario's table(s)."""

    def best_peer(
        self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]], roles: Mapping[str, str]
    ) -> float | None:
        """The best peer figure of ``case``'s group in the same round."""
        values = [
            float(m[metric])
            for c, m in same_round
            if roles.get(c.system) == "peer" and c.group == case.group and m.get(metric) is not None
        ]
        if not values:
            return None
        return max(values) if self.higher_is_better else min(values)


# -- formatting helpers shared by the tables -----------------------------------------------


def fmt_rate(stats: tuple[float, float, float] | None) -> str:
    """``12,345 [12,001-12,900]`` (with an en dash) for jobs/s."""
    if stats is None:
        return "—"
    med, lo, hi = stats
    if lo == hi:
        return f"{med:,.0f}"
    return f"{med:,.0f} [{lo:,.0f}–{hi:,.0f}]"


def fmt_ms(stats: tuple[float, float, float] | None, *, spread: bool = True) -> str:
    """``1.42 [1.25-1.46]`` (with an en dash) for milliseconds."""
    if stats is None:
        return "—"
    med, lo, hi = stats
    if not spread or lo == hi:
        return f"{med:.2f}"
    return f"{med:.2f} [{lo:.2f}–{hi:.2f}]"


def fmt_ratio(value: float | None) -> str:
    """``0.72`` followed by a multiplication sign; a dash when there is nothing to compare with."""
    if value is None:
        return "—"
    if value < 0.1:
        return f"{value:.3f}×"
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def status_cell(row: RowSummary) -> str:
    """What a row shows instead of figures when it did not run."""
    if row.status == "ok":
        return ""
    reason = (row.reason.strip().splitlines() or [""])[0].replace("|", "/")
    if len(reason) > 140:
        reason = reason[:137] + "..."
    return f"*{row.status}*: {reason}" if reason else f"*{row.status}*"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation, as numpy's default."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median_or_none(values: list[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None


def first_figure(same_round: list[tuple[Case, Metrics]], metric: str, match: Callable[[Case], bool]) -> float | None:
    """``metric`` of the first case of the round that ``match`` accepts and that measured it."""
    for other, metrics in same_round:
        if match(other) and metrics.get(metric):
            return float(metrics[metric])
    return None
