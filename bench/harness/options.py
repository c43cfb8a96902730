"""Run-wide options: sizes and modes, shared by the orchestrator and every measurement."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class Options:
    """How much work each scenario does. ``--quick`` and ``--big`` pick other sizes."""

    rounds: int = 3
    quick: bool = False
    big: bool = False
    #: Enqueue: jobs per measurement, and the batch size of the batched variant.
    enqueue_jobs: int = 10_000
    enqueue_batch_jobs: int = 10_000
    enqueue_batch: int = 1_000
    #: Drain: pre-enqueued jobs (and the big size, with --big).
    drain_jobs: int = 20_000
    big_drain_jobs: int = 200_000
    #: Prefill batch size (untimed).
    prefill_batch: int = 1_000
    #: Latency: probe jobs, their spacing, warm-up jobs left out of the figures,
    #: and the pause between starting the worker and the first job.
    latency_jobs: int = 200
    latency_interval_ms: float = 20.0
    latency_warmup: int = 10
    latency_settle_s: float = 1.5
    #: Give up on one measurement after this long.
    case_timeout_s: float = 900.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, *, rounds: int | None, quick: bool, big: bool, **overrides: Any) -> Options:
        """The defaults, or the smoke-run sizes for ``--quick``, then explicit overrides."""
        values: dict[str, Any] = {"quick": quick, "big": big}
        if quick:
            values.update(
                rounds=1,
                enqueue_jobs=2_000,
                enqueue_batch_jobs=10_000,
                drain_jobs=5_000,
                big_drain_jobs=50_000,
                latency_jobs=50,
                latency_warmup=5,
                latency_settle_s=1.0,
            )
        if rounds is not None:
            values["rounds"] = rounds
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """Plain data for the results file and the measurement subprocesses."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Options:
        """Inverse of ``to_json``."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
