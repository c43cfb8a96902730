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

    def drain(self, expect: int = 0, *, settle: float = 0.3) -> list[tuple[str, str]]:
        """(channel, payload) of the notifications delivered: waits up to 5 s for `expect` of them,
        then settle seconds more for any that should not be there."""
        got = []
        if expect:
            got += [(n.channel, n.payload) for n in self.conn.notifies(timeout=5.0, stop_after=expect)]
        got += [(n.channel, n.payload) for n in self.conn.notifies(timeout=settle)]
        return got

    def payloads(self, expect: int, channel: str = "pgsched_jobs") -> list[str]:
        """Payloads of one channel, as drain() collects them."""
        return [payload for ch, payload in self.drain(expect) if ch == channel]


@pytest.fixture
def listener(dsn: str) -> Iterator[Listener]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        c.execute("LISTEN pgsched_jobs")
        c.execute("LISTEN pgsched_scheduled")
        yield Listener(c)
