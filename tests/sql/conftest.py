"""Fixtures of the SQL contract tests: the database clock and a LISTENing connection."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.sql.helpers import Conn, db_now


@pytest.fixture
def now(conn: Conn) -> datetime:
    """The database's now() at the start of the test; tests pass later times as p_now."""
    return db_now(conn)


class Listener:
    """A second connection that LISTENs to pgsched's wake-up channels."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def drain(self, timeout: float = 0.5) -> list[tuple[str, str]]:
        """(channel, payload) of every notification delivered within timeout seconds."""
        return [(n.channel, n.payload) for n in self.conn.notifies(timeout=timeout)]

    def payloads(self, channel: str = "pgsched_jobs", timeout: float = 0.5) -> list[str]:
        return [payload for ch, payload in self.drain(timeout) if ch == channel]


@pytest.fixture
def listener(dsn: str) -> Iterator[Listener]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        c.execute("LISTEN pgsched_jobs")
        c.execute("LISTEN pgsched_scheduled")
        yield Listener(c)
