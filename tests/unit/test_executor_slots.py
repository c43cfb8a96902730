"""Which jobs taking a slot skip the start() gate (pgsched.runtime.executor), and how many a claim may start."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from pgsched.core.job import JobContext
from pgsched.runtime import executor
from pgsched.runtime.executor import START_TOLERANCE, Executor
from tests.unit.test_held import _ctx as held_ctx

pytestmark = pytest.mark.unit


def _ctx(job_id: int, *, stamped_at: float | None = None, timeout: float | None = None) -> JobContext:
    ctx = held_ctx(job_id, token=job_id)
    ctx.timeout = timeout
    if stamped_at is not None:
        ctx._stamped, ctx._stamped_at = True, stamped_at
    return ctx


class _Recorded(Executor):
    """An executor whose launches and gate are recorded, not run (its threads are never started)."""

    def __init__(self, concurrency: int) -> None:
        super().__init__(concurrency, resolve=lambda _name: None, done=lambda _ctx, _outcome: None)
        self.launched: list[int] = []
        self.gated: list[int] = []
        self.gate = lambda contexts: self.gated.extend(c.id for c in contexts)

    def launch(self, contexts: list[JobContext]) -> None:
        self.launched.extend(c.id for c in contexts)

    def free_one(self) -> None:
        """A run ends: its slot goes to the next job waiting."""
        with self._lock:
            self._running -= 1
            self._freed += 1
            starting = self._take_slots()
        self._admit(starting)


def test_a_job_the_claim_started_skips_the_gate_only_within_the_tolerance() -> None:
    ex = _Recorded(3)
    now = time.monotonic()
    fresh = _ctx(1, stamped_at=now, timeout=30.0)
    stale = _ctx(2, stamped_at=now - 10 * START_TOLERANCE, timeout=30.0)
    plain = _ctx(3)
    ex.submit_many([fresh, stale, plain])
    assert ex.launched == [1]  # its start, recorded by the claim, is at most START_TOLERANCE early
    assert ex.gated == [2, 3]  # start() records the start again, or for the first time


def test_a_started_job_that_waited_for_its_slot_past_the_tolerance_is_gated() -> None:
    ex = _Recorded(1)
    ex.submit_many([_ctx(1)])
    assert ex.gated == [1]
    waiting = _ctx(2, stamped_at=time.monotonic() - 2 * START_TOLERANCE)  # claimed 2 tolerances ago, waiting
    ex.submit_many([waiting])
    assert ex.launched == []
    assert ex.gated == [1]
    ex.free_one()
    assert ex.gated == [1, 2]
    assert ex.launched == []


def test_slots_within_counts_free_slots_and_those_freeing_up_beyond_the_jobs_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]  # the executor's monotonic clock, moved by the test
    monkeypatch.setattr(executor, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    ex = _Recorded(10)
    assert ex.slots_within(START_TOLERANCE) == 10  # all free, no rate yet
    ex.submit_many([_ctx(i) for i in range(10)])
    assert ex.slots_within(START_TOLERANCE) == 0  # all taken, nothing freeing up
    # slots free up at 5,000 a second, and the worker asks before each claim (here every 10 ms):
    # after a second, the rate it counts with is most of the true one (an average over about a second)
    ex.submit_many([_ctx(100 + i) for i in range(10)])
    began = clock[0]
    freed, asked = 0, began
    while clock[0] < began + 1.0:
        clock[0] += 0.0002
        ex.submit_many([_ctx(1000 + freed)])
        ex.free_one()
        freed += 1
        if clock[0] - asked >= 0.01:
            ex.slots_within(START_TOLERANCE)
            asked = clock[0]
    rate = freed / (clock[0] - began)
    got = ex.slots_within(0.010)
    assert int(rate * 0.010 * 0.3) - 10 <= got <= int(rate * 0.010) - 10 + 1  # minus the 10 waiting
