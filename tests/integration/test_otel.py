"""pgsched[otel]: the trace current at enqueue is stored with the job and continued by its run, with the real
opentelemetry-sdk and an in-memory exporter; without OpenTelemetry installed, nothing of it runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pgsched import App
from pgsched.observe import otel
from tests.integration.conftest import Running, wait_all, wait_for, wait_state

Conn = psycopg.Connection[Any]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[TracerProvider]:
    """An SDK TracerProvider for pgsched's spans and the test's own, for this test only (not the global one)."""
    created = TracerProvider()
    monkeypatch.setattr(otel, "_tracer", created.get_tracer("pgsched"))
    yield created
    created.shutdown()


@pytest.fixture
def spans(provider: TracerProvider) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def wait_spans(exporter: InMemorySpanExporter, name: str, n: int) -> list[ReadableSpan]:
    # A worker's span ends after the job's completion is written: wait for it, not for the row.
    return wait_for(lambda: len(named(exporter, name)) >= n and named(exporter, name), what=f"{n} {name!r} spans")


def ok(n: int) -> int:
    """Registered by the tests below."""
    return n * 2


def test_the_run_continues_the_trace_current_at_enqueue(
    app: App, conn: Conn, provider: TracerProvider, spans: InMemorySpanExporter, start_worker: Callable[..., Running]
) -> None:
    assert otel.ENABLED
    task = app.task(name="otel.ok", queue="traced")(ok)
    with provider.get_tracer("test").start_as_current_span("request") as request:
        job_id = task.enqueue(21)
    request_ctx = request.get_span_context()

    (send,) = named(spans, "send traced")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request_ctx.span_id
    assert send.context.trace_id == request_ctx.trace_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "pgsched",
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "traced",
        "pgsched.task": "otel.ok",
        "messaging.message.id": str(job_id),
    }
    # Stored with the job: the W3C traceparent of the producer span.
    row = conn.execute("SELECT trace_context FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    assert row["trace_context"]["traceparent"] == (
        f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}-{send.context.trace_flags:02x}"
    )

    start_worker(queues=["traced"], name="w-otel")
    wait_state(conn, job_id, "completed", timeout=30)
    (run,) = wait_spans(spans, "process traced", 1)
    assert run.kind is SpanKind.CONSUMER
    assert run.context.trace_id == request_ctx.trace_id
    assert run.parent is not None
    assert run.parent.span_id == send.context.span_id
    assert run.parent.is_remote  # it came through the database
    attributes = dict(run.attributes or {})
    assert attributes == {
        "messaging.system": "pgsched",
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        "messaging.destination.name": "traced",
        "messaging.message.id": str(job_id),
        "messaging.client.id": "w-otel",
        "pgsched.task": "otel.ok",
        "pgsched.job.attempt": 1,
        "pgsched.job.max_attempts": attributes["pgsched.job.max_attempts"],
        "pgsched.job.outcome": "complete",
    }
    assert run.status.status_code is StatusCode.UNSET


def test_a_failing_run_records_the_exception_and_an_error_status_on_every_attempt(
    app: App, conn: Conn, provider: TracerProvider, spans: InMemorySpanExporter, start_worker: Callable[..., Running]
) -> None:
    @app.task(name="otel.boom", queue="boom", max_attempts=2, retry_backoff=0.01, retry_backoff_max=0.01)
    def boom() -> None:
        raise ValueError("the payment service said no")

    with provider.get_tracer("test").start_as_current_span("request") as request:
        job_id = boom.enqueue()
    start_worker(queues=["boom"])
    wait_state(conn, job_id, "dead", timeout=30)
    runs = sorted(wait_spans(spans, "process boom", 2), key=lambda s: s.start_time or 0)
    (send,) = named(spans, "send boom")
    assert [dict(s.attributes or {})["pgsched.job.attempt"] for s in runs] == [1, 2]
    assert [dict(s.attributes or {})["pgsched.job.outcome"] for s in runs] == ["fail", "fail"]
    for run in runs:
        assert run.context.trace_id == request.get_span_context().trace_id
        assert run.parent is not None
        assert run.parent.span_id == send.context.span_id
        assert run.status.status_code is StatusCode.ERROR
        assert run.status.description == "ValueError: the payment service said no"
        (event,) = [e for e in run.events if e.name == "exception"]
        attributes = dict(event.attributes or {})
        assert attributes["exception.type"] == "ValueError"
        assert attributes["exception.message"] == "the payment service said no"
        assert "Traceback" in str(attributes["exception.stacktrace"])


async def ahandler(n: int) -> str:
    """Registered by the tests below: the run span is current inside the coroutine."""
    span = trace.get_current_span()
    assert span.get_span_context().is_valid
    return format(span.get_span_context().trace_id, "032x")


def test_async_batch_enqueue_in_the_callers_transaction_and_async_handlers(
    app: App,
    dsn: str,
    conn: Conn,
    provider: TracerProvider,
    spans: InMemorySpanExporter,
    start_worker: Callable[..., Running],
) -> None:
    task = app.task(name="otel.async", queue="abatch")(ahandler)

    async def main() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn) as caller:
            with provider.get_tracer("test").start_as_current_span("request"):
                handles = await app.enqueue_many_async([task.job(i) for i in range(3)], conn=caller)
            await caller.commit()
        return [int(h) for h in handles]

    ids = asyncio.run(main())
    (send,) = named(spans, "send abatch")
    assert dict(send.attributes or {})["messaging.batch.message_count"] == 3
    assert dict(send.attributes or {})["pgsched.job.ids"] == tuple(str(i) for i in ids)
    start_worker(queues=["abatch"])
    wait_all(conn, ids, "completed", timeout=30)
    runs = wait_spans(spans, "process abatch", 3)
    trace_id = format(send.context.trace_id, "032x")
    assert {r.parent.span_id for r in runs if r.parent} == {send.context.span_id}
    results = conn.execute("SELECT result FROM pgsched.job_history WHERE id = ANY(%s)", [ids]).fetchall()
    assert [r["result"] for r in results] == [trace_id] * 3  # the handler saw its run span as current


def test_a_plain_insert_carries_a_trace_from_another_language_and_bad_headers_never_stop_a_job(
    app: App, conn: Conn, spans: InMemorySpanExporter, start_worker: Callable[..., Running]
) -> None:
    app.task(name="otel.sql", queue="sql")(ok)
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with psycopg.connect(conn.info.dsn, autocommit=True) as enqueuer:
        enqueuer.execute("SET ROLE pgsched_enqueue")
        traced = enqueuer.execute(
            "INSERT INTO pgsched.jobs (task, args, queue, trace_context) VALUES ('otel.sql', '{\"n\": 1}', 'sql', %s)"
            " RETURNING id",
            [json.dumps({"traceparent": parent, "tracestate": "vendor=1"})],
        ).fetchone()
        garbled = enqueuer.execute(
            "INSERT INTO pgsched.jobs (task, args, queue, trace_context)"
            " VALUES ('otel.sql', '{\"n\": 2}', 'sql', '{\"traceparent\": 7, \"x\": [1]}') RETURNING id"
        ).fetchone()
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_trace_context_valid"):
            enqueuer.execute(
                "INSERT INTO pgsched.jobs (task, args, trace_context) VALUES ('otel.sql', '{}', '\"00-abc\"')"
            )
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_trace_context_valid"):
            enqueuer.execute(
                "INSERT INTO pgsched.jobs (task, args, trace_context) VALUES ('otel.sql', '{}', %s)",
                [json.dumps({"baggage": "x" * 9000})],
            )
    assert traced is not None
    assert garbled is not None
    start_worker(queues=["sql"])
    wait_all(conn, [traced[0], garbled[0]], "completed", timeout=30)
    runs = {dict(s.attributes or {})["messaging.message.id"]: s for s in wait_spans(spans, "process sql", 2)}
    continued, root = runs[str(traced[0])], runs[str(garbled[0])]
    assert continued.context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert continued.parent is not None
    assert continued.parent.span_id == 0x00F067AA0BA902B7
    assert root.parent is None  # nothing usable was stored: the run starts a trace of its own


def test_with_the_api_but_no_sdk_configured_nothing_is_stored(conn: Conn) -> None:
    # A process that has OpenTelemetry installed but set up no TracerProvider: spans are
    # non-recording, the propagator has nothing to write, the column stays NULL.
    code = textwrap.dedent(
        f"""
        import json, psycopg
        from pgsched import App
        from pgsched.observe import otel
        assert otel.ENABLED
        app = App({conn.info.dsn!r})
        job = app.enqueue("otel.none", {{}})
        with psycopg.connect({conn.info.dsn!r}) as c:
            print(json.dumps(c.execute("SELECT trace_context FROM pgsched.jobs WHERE id = %s", [job]).fetchone()[0]))
        """
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) is None


BLOCKED = '''
import sys

class _NoOpenTelemetry:
    """Makes opentelemetry look uninstalled, as after a plain `pip install pgsched`."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoOpenTelemetry())
'''


def test_without_opentelemetry_installed_nothing_of_it_runs(dsn: str, tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCKED)
    code = textwrap.dedent(
        f"""
        import sys
        import psycopg
        from pgsched import App
        from pgsched.observe import otel

        assert otel.ENABLED is False
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]

        def never(*args, **kwargs):
            raise AssertionError("a tracing function ran without OpenTelemetry")

        # Every entry point of the module: none may be reached, per job or otherwise.
        for name in ("enqueue_span", "run_span", "current_context", "tracer", "live"):
            setattr(otel, name, never)

        app = App({dsn!r})

        @app.task(name="plain.sync")
        def sync(n: int) -> int:
            return n

        @app.task(name="plain.async")
        async def coro(n: int) -> int:
            return n

        ids = [sync.enqueue(1), coro.enqueue(2)]
        ids += app.enqueue_many([sync.job(3), coro.job(4)])
        with psycopg.connect({dsn!r}) as c:
            assert c.execute("SELECT count(*) FROM pgsched.jobs WHERE trace_context IS NULL").fetchone()[0] == 4
        assert app.drain().ran == 4
        ids.append(sync.enqueue(5))
        ids.append(coro.enqueue(6))
        app.run_worker(burst=True, install_signal_handlers=False, listen=False, poll_interval=0.1)
        with psycopg.connect({dsn!r}) as c:
            done = c.execute(
                "SELECT count(*) FROM pgsched.job_history WHERE id = ANY(%s) AND state = 'completed'", [ids]
            ).fetchone()[0]
        assert done == 6, done
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=240)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "ok"


def test_baggage_travels_with_the_job_until_the_headers_outgrow_the_column(
    app: App, conn: Conn, provider: TracerProvider, spans: InMemorySpanExporter
) -> None:
    from opentelemetry import baggage, context

    task = app.task(name="otel.bag")(ok)
    tracer = provider.get_tracer("test")
    token = context.attach(baggage.set_baggage("user", "42"))
    try:
        with tracer.start_as_current_span("request"):
            small = task.enqueue(1)
    finally:
        context.detach(token)
    large_ctx = context.get_current()
    for n in range(3):
        large_ctx = baggage.set_baggage(f"k{n}", "v" * 2700, context=large_ctx)
    token = context.attach(large_ctx)
    try:
        with tracer.start_as_current_span("request"):
            large = task.enqueue(2)  # never refused for its headers
    finally:
        context.detach(token)
    rows = {
        r["id"]: r["trace_context"]
        for r in conn.execute("SELECT id, trace_context FROM pgsched.jobs WHERE id = ANY(%s)", [[small, large]])
    }
    assert rows[small]["baggage"] == "user=42"
    assert set(rows[small]) == {"traceparent", "baggage"}
    assert set(rows[large]) == {"traceparent"}  # the baggage alone made them too large: the trace is kept
