"""The registry of scenarios, in the order they run within a round.

To add a scenario (delayed-job start lag, a million far-future jobs, sustained
load, audit on/off, sharded claimers ...): subclass ``Scenario`` in a module of
its own, implement ``cases``, ``run``, ``raw_reference`` and ``render``, and add
an instance here. ``--only NAME`` then selects it; systems that cannot run it
say why through ``System.skip_reason``.
"""

from __future__ import annotations

from bench.scenarios.base import Case, CaseEnv, RowSummary, Scenario
from bench.scenarios.drain import DrainScenario
from bench.scenarios.enqueue import EnqueueScenario
from bench.scenarios.latency import LatencyScenario

SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario for scenario in (EnqueueScenario(), DrainScenario(), LatencyScenario())
}

__all__ = ["SCENARIOS", "Case", "CaseEnv", "RowSummary", "Scenario"]
