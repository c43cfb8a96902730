"""The Oban for Python worker the benchmark enqueues and runs: ``bench.apps.oban_app.Noop``.

Imported only in bench/.venv-py312 (Oban needs Python >= 3.12), by the
enqueueing code and by the worker processes. Jobs carry ``{"i": i}``; the
harness points ``hit`` at its counter before the worker starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oban import Job, worker

#: The queue every benchmark job goes to.
QUEUE = "bench"


def _ignore(i: int) -> None:
    return None


#: Set by the benchmark's worker process to its ``ctx.hit``.
hit: Callable[[int], None] = _ignore


@worker(queue=QUEUE)
class Noop:
    """The no-op job: counts itself and returns."""

    async def process(self, job: Job) -> None:
        hit(int(job.args.get("i", 0)))


def new(i: int, **params: Any) -> Job:
    """Job ``i`` (``params``: Oban's job options, e.g. ``scheduled_at``)."""
    job: Job = Noop.new({"i": i}, **params)  # type: ignore[attr-defined]
    return job
