"""FastAPI: enqueue in the request's own transaction, so a job exists exactly when the request's writes commit.

    pip install path/to/pgsched-0.1.0-py3-none-any.whl 'fastapi>=0.121' uvicorn
    export PGSCHED_DSN=postgresql://app@localhost/app       # pgsched migrated into it: pgsched migrate
    uvicorn fastapi_app:api                                  # the web app (this file, saved as fastapi_app.py)
    pgsched worker --app fastapi_app:tasks --queues emails   # runs the welcome mails

Each request gets one connection from a pool and one transaction on it (the
``transaction`` dependency): committed when the endpoint returns, before the
response is sent; rolled back when it raises, whatever it raises. The job is
written with ``enqueue_async(..., conn=conn)`` in that transaction, so a request
that fails after the enqueue leaves neither its user row nor its job behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Request
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from pgsched import App

tasks = App()  # PGSCHED_DSN, then DATABASE_URL


@tasks.task(queue="emails", max_attempts=5)
def send_welcome(user_id: int) -> str:
    # A real app would call its mail service here; the return value is the job's result.
    return f"welcome mail sent to user {user_id}"


SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS referrals (
    user_id bigint NOT NULL REFERENCES users,
    referred_by bigint NOT NULL REFERENCES users
)
"""


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    async with AsyncConnectionPool(tasks.dsn, min_size=1, max_size=10, open=False) as pool:
        async with pool.connection() as conn:
            for statement in SCHEMA.strip().split(";\n"):
                await conn.execute(statement)
        api.state.pool = pool
        yield


api = FastAPI(lifespan=lifespan)


async def transaction(request: Request) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """The request's transaction: the pool commits it when the endpoint returns, rolls it back when it raises."""
    pool: AsyncConnectionPool = request.app.state.pool
    async with pool.connection() as conn:
        yield conn


# scope="function": the dependency ends (and commits) when the endpoint returns, before the response goes out.
Transaction = Annotated[psycopg.AsyncConnection[Any], Depends(transaction, scope="function")]


class Signup(BaseModel):
    email: str
    referred_by: int | None = None


@api.post("/signup", status_code=201)
async def signup(body: Signup, conn: Transaction) -> dict[str, int]:
    cur = await conn.execute("INSERT INTO users (email) VALUES (%s) RETURNING id", [body.email])
    row = await cur.fetchone()
    assert row is not None
    user_id = int(row[0])
    job = await send_welcome.enqueue_async(user_id, conn=conn)
    if body.email.endswith(".invalid"):
        # A failure after the enqueue: the user row and the job roll back together.
        raise HTTPException(422, "no mail can reach this address")
    if body.referred_by is not None:
        # An unknown referrer is a foreign key violation: a 500, and again nothing of the request stays.
        await conn.execute("INSERT INTO referrals (user_id, referred_by) VALUES (%s, %s)", [user_id, body.referred_by])
    return {"user_id": user_id, "welcome_job": job.id}
