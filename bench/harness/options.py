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
    #: Also run the long scenarios (sustained) in a run without --only.
    long: bool = False
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
    #: Delayed jobs: probes, due between delayed_min_s and delayed_max_s after the enqueue (evenly spread).
    delayed_jobs: int = 200
    delayed_min_s: float = 0.2
    delayed_max_s: float = 2.0
    #: Scale: rows of far-future (or finished) backlog, timed claims of 10, jobs drained.
    backlog_jobs: int = 1_000_000
    scale_claims: int = 2_000
    scale_drain_jobs: int = 20_000
    #: Audit on/off, fencing and sharding: pre-enqueued jobs per drain.
    audit_jobs: int = 20_000
    fencing_jobs: int = 20_000
    sharding_jobs: int = 40_000
    #: Sustained load: seconds at a fixed rate (load x the measured capacity), after a capacity probe.
    sustained_s: float = 600.0
    sustained_load: float = 0.7
    sustained_probe_jobs: int = 20_000
    #: Give up on one measurement after this long.
    case_timeout_s: float = 900.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, *, rounds: int | None, quick: bool, big: bool, long: bool = False, **overrides: Any) -> Options:
        """The defaults, or the smoke-run sizes for ``--quick``, then explicit overrides."""
        values: dict[str, Any] = {"quick": quick, "big": big, "long": long}
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
                delayed_jobs=50,
                backlog_jobs=100_000,
                scale_claims=500,
                scale_drain_jobs=5_000,
                audit_jobs=5_000,
                fencing_jobs=5_000,
                sharding_jobs=10_000,
                sustained_s=60.0,
                sustained_probe_jobs=5_000,
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
