"""Scenario 7: races, each many times with random timing, straight against the SQL functions.

cancel vs claim (a terminal state is never overwritten; a job whose cancel
returned 'cancelled' never starts), lease expiry vs completion, re-claim vs
a stale rescue, and 100 concurrent enqueues of one idempotency key from 10
connections (exactly one job).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import pytest

from tests.chaos import races
from tests.chaos.checker import Report, emit
from tests.chaos.conftest import Env


@dataclass
class Sizes:
    cancel: int
    expiry: int
    rescue: int
    enqueue_rounds: int


def run_races(dsn: str, sizes: Sizes, label: str = "") -> None:
    results: dict[str, Counter[str]] = {}
    started = time.monotonic()
    results["cancel vs claim"] = races.cancel_vs_claim(dsn, sizes.cancel)
    results["lease expiry vs completion"] = races.expiry_vs_completion(dsn, sizes.expiry)
    results["re-claim vs stale rescue"] = races.reclaim_vs_stale_rescue(dsn, sizes.rescue)
    results["100 enqueues of one key / 10 conns"] = races.concurrent_idempotent_enqueue(dsn, sizes.enqueue_rounds)
    total = sizes.cancel + sizes.expiry + sizes.rescue + sizes.enqueue_rounds
    report = Report(scenario=f"7. races{label}", enqueued=total, runs=total)
    for name, seen in results.items():
        report.notes[name] = ", ".join(f"{k}: {v}" for k, v in sorted(seen.items()))
    report.notes["took"] = f"{time.monotonic() - started:.1f}s"
    emit(report)
    # Both orders of the races that have two must actually have happened, or the test proved little.
    assert len(results["cancel vs claim"]) >= 2, results["cancel vs claim"]
    assert len(results["lease expiry vs completion"]) == 2, results["lease expiry vs completion"]


def test_races_quick(env: Env) -> None:
    run_races(env.dsn, Sizes(cancel=120, expiry=100, rescue=80, enqueue_rounds=3))


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_races(env: Env) -> None:
    run_races(env.dsn, Sizes(cancel=3000, expiry=2000, rescue=2000, enqueue_rounds=40))
