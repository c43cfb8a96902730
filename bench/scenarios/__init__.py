"""The registry of scenarios, in the order they run within a round.

To add a scenario: subclass ``Scenario`` in a module of its own, implement
``cases``, ``run``, ``raw_reference`` and ``render``, and add an instance here.
``--only NAME`` then selects it; systems that cannot run it say why through
``System.skip_reason``. A scenario marked ``long`` runs only when named, with
``--long``, or at its ``--quick`` size.
"""

from __future__ import annotations

from bench.scenarios.audit import AuditScenario
from bench.scenarios.base import Case, CaseEnv, RowSummary, Scenario
from bench.scenarios.delayed import DelayedScenario
from bench.scenarios.dispatch import DispatchScenario
from bench.scenarios.drain import DrainScenario
from bench.scenarios.enqueue import EnqueueScenario
from bench.scenarios.fencing import FencingScenario
from bench.scenarios.latency import LatencyScenario
from bench.scenarios.scale import ScaleScenario
from bench.scenarios.sharding import ShardingScenario
from bench.scenarios.sustained import SustainedScenario

SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        EnqueueScenario(),
        DrainScenario(),
        LatencyScenario(),
        DelayedScenario(),
        ScaleScenario(),
        AuditScenario(),
        FencingScenario(),
        ShardingScenario(),
        DispatchScenario(),
        SustainedScenario(),
    )
}

__all__ = ["SCENARIOS", "Case", "CaseEnv", "RowSummary", "Scenario"]
