"""OpenTelemetry tracing (``pip install 'pgsched[otel]'``): the enqueuer's trace travels with the job.

At enqueue, a producer span ``send <queue>`` is started and the trace context
current inside it (the configured propagator's headers: W3C ``traceparent``,
``tracestate``, baggage) is stored in the job's ``trace_context`` column. A
worker continues that trace: each run is a consumer span ``process <queue>``
whose parent is the enqueue span, with the messaging attributes below, the
exception and an error status when the handler failed. Spans go to whatever
TracerProvider the application set up; without one the API records nothing.

Without OpenTelemetry installed the import below fails once, ``ENABLED`` is
False, and neither enqueue nor the worker calls anything in this module. With
the API but no tracer provider set up, ``live()`` says so and no span is made.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    ENABLED = True
except ImportError:  # the extra is not installed: tracing is off, and costs nothing
    ENABLED = False

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from pgsched.core.job import JobContext
    from pgsched.core.outcome import Outcome
    from pgsched.core.task import JobSpec

SYSTEM: Final = "pgsched"
# The bound of the rule jobs_trace_context_valid (pgsched._check_trace_context): a larger carrier keeps only
# traceparent and tracestate (and none at all if even those do not fit).
MAX_CONTEXT_BYTES: Final = 8192
_KEPT_WHEN_LARGE: Final = ("traceparent", "tracestate")
# A batch span lists its job ids up to this many (its message count is always there).
MAX_LISTED_IDS: Final = 100

_tracer: Any = None


def tracer() -> Any:
    """pgsched's tracer (a proxy until the application sets a TracerProvider, then the real one)."""
    global _tracer
    if _tracer is None:
        from pgsched.core.version import VERSION

        _tracer = trace.get_tracer("pgsched", VERSION)
    return _tracer


def live() -> bool:
    """Whether spans would be recorded: the application set up a tracer provider (else skip them, and their cost)."""
    found = tracer()
    if isinstance(found, trace.ProxyTracer):
        return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    return not isinstance(found, trace.NoOpTracer)


def current_context() -> str | None:
    """The trace context current here as the JSON object stored with a job, or None when there is none."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return None
    text = json.dumps(carrier, separators=(",", ":"))
    if len(text.encode()) > MAX_CONTEXT_BYTES:
        text = json.dumps({k: v for k, v in carrier.items() if k in _KEPT_WHEN_LARGE}, separators=(",", ":"))
    # Tracing never refuses an enqueue: headers that still do not fit are left out.
    return text if len(text.encode()) <= MAX_CONTEXT_BYTES else None


class Enqueue:
    """The producer span of one enqueue call: ``context`` goes into the jobs; ``sent(ids)`` names them."""

    __slots__ = ("context", "span")

    def __init__(self, span: Span | None, context: str | None) -> None:
        self.span = span
        self.context = context

    def sent(self, ids: Sequence[int]) -> None:
        if self.span is None or not self.span.is_recording():
            return
        if len(ids) == 1:
            self.span.set_attribute("messaging.message.id", str(ids[0]))
        elif len(ids) <= MAX_LISTED_IDS:
            self.span.set_attribute("pgsched.job.ids", [str(i) for i in ids])


@contextmanager
def enqueue_span(specs: Sequence[JobSpec]) -> Iterator[Enqueue]:
    """Around an enqueue: a producer span, current while the jobs are written, and its context for them."""
    queues = sorted({spec.queue or "default" for spec in specs})
    tasks = sorted({spec.task for spec in specs})
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": queues[0] if len(queues) == 1 else ",".join(queues),
        "pgsched.task": tasks[0] if len(tasks) == 1 else ",".join(tasks),
    }
    if len(specs) != 1:
        attributes["messaging.batch.message_count"] = len(specs)
    name = f"send {queues[0]}" if len(queues) == 1 else "send"
    with tracer().start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes) as span:
        yield Enqueue(span, current_context())


@contextmanager
def run_span(ctx: JobContext) -> Iterator[Run]:
    """Around one run of a job: a consumer span whose parent is the trace stored at enqueue."""
    job = ctx.job
    parent = _parent(job.trace_context) if job.trace_context else None
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
        "messaging.client.id": ctx.worker,
        "pgsched.task": job.task,
        "pgsched.job.attempt": job.attempt,
        "pgsched.job.max_attempts": job.max_attempts,
    }
    with tracer().start_as_current_span(
        f"process {job.queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield Run(span)


def _parent(stored: Any) -> Any:
    """The context a stored carrier names; None for anything else (a plain INSERT may store any object)."""
    if not isinstance(stored, dict):
        return None
    carrier = {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, str)}
    try:
        return propagate.extract(carrier)
    except Exception:  # a malformed header never stops a job
        return None


class Run:
    """The consumer span of one run; ``end(outcome)`` records how it ended and returns the outcome."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def end(self, outcome: Outcome) -> Outcome:
        from pgsched.core.outcome import Kind

        span = self.span
        if not span.is_recording():
            return outcome
        span.set_attribute("pgsched.job.outcome", str(outcome.kind))
        if outcome.kind in (Kind.COMPLETE, Kind.SNOOZE):
            return outcome
        if outcome.exception is not None:
            span.record_exception(outcome.exception)
        if outcome.error is not None and outcome.error.startswith("cancelled: "):
            return outcome  # a cancel the user asked for is not an error
        lines = (outcome.error or str(outcome.kind)).strip().splitlines()
        span.set_status(Status(StatusCode.ERROR, lines[-1] if lines else str(outcome.kind)))
        return outcome
