"""What becomes of a run's outcome between the executor and the completer (pgsched.runtime.held)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import cast

import pytest

from pgsched.core.job import ClaimedJob, JobContext
from pgsched.core.outcome import Kind, Outcome
from pgsched.observe.metrics import WorkerMetrics
from pgsched.runtime.completer import Completer
from pgsched.runtime.held import Held, corrected

pytestmark = pytest.mark.unit


def _ctx(job_id: int = 1, token: int = 7) -> JobContext:
    now = datetime.now(UTC)
    job = ClaimedJob(
        id=job_id,
        shard=0,
        queue="default",
        task="t",
        args={},
        attempt=1,
        max_attempts=3,
        lease_token=token,
        idempotency_key=None,
        run_at=now,
        priority=0,
        tenant=None,
        created_at=now,
    )
    return JobContext(job=job, worker="w")


class _Sink:
    """Takes outcomes as the completer does (a thread-safe list; nothing written)."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self.pending: list[tuple[int, int]] = []

    def submit(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def pending_jobs(self) -> list[tuple[int, int]]:
        return list(self.pending)


def _held() -> tuple[Held, _Sink, list[int], list[int], dict[str, int]]:
    freed: list[int] = []
    interrupted: list[int] = []
    counts = {"lost": 0}
    held = Held(WorkerMetrics(), counts, on_free=freed.append)
    sink = _Sink()
    held.completer = cast(Completer, sink)
    held.interrupt = interrupted.append
    return held, sink, freed, interrupted, counts


def test_an_outcome_passes_unchanged_when_nothing_happened_meanwhile() -> None:
    ctx = _ctx()
    done = Outcome(ctx.job, Kind.COMPLETE, result="1")
    assert corrected(ctx, done) is done


def test_a_run_that_lost_its_lease_is_discarded_whatever_it_returned() -> None:
    ctx = _ctx()
    ctx._mark_lease_lost()
    for kind in (Kind.COMPLETE, Kind.FAIL, Kind.SNOOZE):
        final = corrected(ctx, Outcome(ctx.job, kind))
        assert final is not None
        assert final.kind is Kind.DISCARD


def test_returning_after_a_cancel_request_is_recorded_as_a_failure_that_keeps_the_result() -> None:
    ctx = _ctx()
    ctx._request_cancel()
    final = corrected(ctx, Outcome(ctx.job, Kind.COMPLETE, result='{"n": 1}'))
    assert final is not None
    assert final.kind is Kind.FAIL
    assert final.result == '{"n": 1}'
    assert final.error is not None
    assert "cancel" in final.error
    failed = Outcome(ctx.job, Kind.FAIL, error="boom")
    assert corrected(ctx, failed) is failed


def test_a_run_stopped_by_shutdown_is_handed_back_not_written() -> None:
    held, sink, freed, _, _ = _held()
    ctx = _ctx()
    held.add([ctx])
    held.stop([ctx])
    held.settle(ctx, Outcome(ctx.job, Kind.COMPLETE))
    assert sink.outcomes == []
    assert freed == []
    assert held.take_stopped() == [ctx]
    assert held.take_stopped() == []
    assert len(held) == 0


def test_settle_hands_the_outcome_to_the_completer_and_frees_the_slot() -> None:
    held, sink, freed, _, counts = _held()
    first, second = _ctx(1), _ctx(2)
    held.add([first, second])
    held.settle(first, Outcome(first.job, Kind.COMPLETE))
    assert [o.job.id for o in sink.outcomes] == [1]
    assert freed == [1]
    second._mark_lease_lost()
    held.settle(second, Outcome(second.job, Kind.COMPLETE))
    assert len(sink.outcomes) == 1
    assert counts["lost"] == 1
    assert freed == [1, 0]


def test_leases_cover_held_jobs_and_unwritten_outcomes_but_not_lost_ones() -> None:
    held, sink, _, interrupted, _ = _held()
    kept, lost = _ctx(1, 11), _ctx(2, 22)
    held.add([kept, lost])
    sink.pending = [(3, 33)]
    held.lose(2)
    held.lose(2)  # told twice: said and interrupted once
    held.lose(99)  # not held here
    assert interrupted == [2]
    assert lost.lease_lost
    assert sorted(held.leases()) == [(1, 11), (3, 33)]


def test_a_cancel_request_reaches_the_handler_once() -> None:
    held, _, _, interrupted, _ = _held()
    ctx = _ctx(5)
    held.add([ctx])
    held.cancel(5)
    held.cancel(5)
    assert ctx.cancel_requested
    assert interrupted == [5]


def test_let_go_gives_up_every_held_job_and_the_stopped_ones() -> None:
    held, _, _, _, _ = _held()
    running, stopped = _ctx(1), _ctx(2)
    held.add([running, stopped])
    held.stop([stopped])
    held.settle(stopped, Outcome(stopped.job, Kind.FAIL, error="stopped"))
    left = held.let_go()
    assert left == [stopped, running]
    assert running.lease_lost
    assert len(held) == 0


def test_settle_is_safe_from_many_handler_threads() -> None:
    held, sink, freed, _, _ = _held()
    contexts = [_ctx(i) for i in range(400)]
    held.add(contexts)

    def settle(part: list[JobContext]) -> None:
        for ctx in part:
            held.settle(ctx, Outcome(ctx.job, Kind.COMPLETE))

    threads = [threading.Thread(target=settle, args=(contexts[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sink.outcomes) == 400
    assert len(held) == 0
    assert sorted(freed)[0] == 0
