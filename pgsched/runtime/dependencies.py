"""ctx.dependencies: reading a running job's dependencies and their outcomes from the database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from pgsched.core.job import Dependency
from pgsched.db import queries
from pgsched.db.translate import translated

# One loader serves every job of whatever runs them (a worker makes thousands of contexts a second: none of them
# gets a loader of its own); it is given the job's id.
Loader = Callable[[int], tuple[Dependency, ...]]


def read(conn: psycopg.Connection[Any], job_id: int) -> tuple[Dependency, ...]:
    """The job's dependencies (pgsched.dependency_outcomes), on this connection."""
    with translated(), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries.DEPENDENCY_OUTCOMES, (job_id,)).fetchall()
    return tuple(Dependency(int(r[0]), str(r[1]), r[2], r[3]) for r in rows)


def from_dsn(dsn: str) -> Loader:
    """A loader that opens a short connection of its own when a handler asks (a worker's handlers)."""

    def load(job_id: int) -> tuple[Dependency, ...]:
        with translated(), psycopg.connect(dsn, autocommit=True) as conn:
            return read(conn, job_id)

    return load


def on(conn: psycopg.Connection[Any]) -> Loader:
    """A loader that reads on ``conn`` (a drain's connection, inside its transaction)."""
    return lambda job_id: read(conn, job_id)
