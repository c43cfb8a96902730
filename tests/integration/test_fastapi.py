"""examples/fastapi_app.py with the real FastAPI, served in-process through httpx's ASGI transport (its lifespan
run as a server runs it) against the test PostgreSQL: the job is written in the request's transaction, so a request
that fails after the enqueue leaves no job; one that succeeds does, and a drain runs it."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psycopg
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app.py"
Conn = psycopg.Connection[Any]


@pytest.fixture
def example(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example module, imported anew with PGSCHED_DSN pointing at the test database."""
    monkeypatch.setenv("PGSCHED_DSN", dsn)
    spec = importlib.util.spec_from_file_location("fastapi_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(module)
    yield module
    module.tasks.close()
    sys.modules.pop(spec.name, None)


Requests = Callable[[httpx.AsyncClient], Awaitable[None]]


def serve(example: ModuleType, requests: Requests) -> None:
    """Run the app's lifespan (its pool, its tables), send the requests, shut it down."""

    async def main() -> None:
        api = example.api
        async with api.router.lifespan_context(api):
            transport = httpx.ASGITransport(app=api, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://app.test") as client:
                await requests(client)

    asyncio.run(main())


def totals(conn: Conn) -> tuple[int, int]:
    with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
        row = cur.execute("SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM pgsched.jobs)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_request_that_fails_after_the_enqueue_leaves_no_job(example: ModuleType, conn: Conn) -> None:
    async def requests(client: httpx.AsyncClient) -> None:
        refused = await client.post("/signup", json={"email": "nobody@mail.invalid"})
        assert refused.status_code == 422, refused.text
        assert refused.json() == {"detail": "no mail can reach this address"}
        assert totals(conn) == (0, 0)

        crashed = await client.post("/signup", json={"email": "a@example.com", "referred_by": 999})
        assert crashed.status_code == 500  # the foreign key violation, after the enqueue
        assert totals(conn) == (0, 0)

    serve(example, requests)


def test_a_request_that_succeeds_leaves_its_job_and_a_worker_runs_it(example: ModuleType, conn: Conn) -> None:
    bodies: list[dict[str, int]] = []

    async def requests(client: httpx.AsyncClient) -> None:
        created = await client.post("/signup", json={"email": "ada@example.com"})
        assert created.status_code == 201, created.text
        bodies.append(created.json())
        # Committed by the time the response arrives: visible on another connection at once.
        assert totals(conn) == (1, 1)
        referred = await client.post("/signup", json={"email": "bob@example.com", "referred_by": bodies[0]["user_id"]})
        assert referred.status_code == 201, referred.text
        assert totals(conn) == (2, 2)

    serve(example, requests)
    (body,) = bodies[:1]
    job = conn.execute("SELECT task, queue, args FROM pgsched.jobs WHERE id = %s", [body["welcome_job"]]).fetchone()
    assert job == {"task": "fastapi_example.send_welcome", "queue": "emails", "args": {"user_id": body["user_id"]}}
    drained = example.tasks.drain(queues=["emails"])
    assert drained.ran == 2
    assert example.tasks.job(body["welcome_job"]).wait(timeout=10) == f"welcome mail sent to user {body['user_id']}"
