"""The producer's own connections: one statement at a time on the caller's connection, else on one of its own.

The App sends its enqueues, cancels and retries through a Producer when no ``conn=`` is given. A connection
found dropped is reopened before a statement is sent, never after: a statement whose reply was lost may
have committed, and sending it again could enqueue a job twice.
"""

from __future__ import annotations

import asyncio
import select
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from pgsched.errors import from_psycopg


class Producer:
    """A synchronous connection and an asynchronous one (bound to the event loop that opened it) to ``dsn()``.

    ``dsn`` is called when a connection opens: the App resolves its DSN lazily and may be pointed elsewhere.
    """

    def __init__(self, dsn: Callable[[], str]) -> None:
        self._dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._aconn: psycopg.AsyncConnection[Any] | None = None
        self._aconn_loop: asyncio.AbstractEventLoop | None = None
        self._alock: asyncio.Lock | None = None

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """A new autocommit connection to the database."""
        try:
            return psycopg.connect(self._dsn(), autocommit=True, **kwargs)
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc

    def run(self, conn: psycopg.Connection[Any] | None, query: Any, params: Sequence[Any]) -> list[Any]:
        try:
            if conn is not None:
                return _fetch(conn, query, params)
            with self._lock:
                if self._conn is None or self._conn.closed or _dropped(self._conn):
                    # Reconnect before sending, never after: a statement whose
                    # reply was lost may have committed, and sending it again
                    # could enqueue a job twice. That error goes to the caller.
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = self.connect()
                return _fetch(self._conn, query, params)
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc

    async def arun(self, conn: psycopg.AsyncConnection[Any] | None, query: Any, params: Sequence[Any]) -> list[Any]:
        try:
            if conn is not None:
                return await _afetch(conn, query, params)
            loop = asyncio.get_running_loop()
            if self._alock is None or self._aconn_loop is not loop:
                # A connection belongs to the loop that opened it: a new loop opens its own.
                self._drop_async()
                self._alock = asyncio.Lock()
                self._aconn_loop = loop
            async with self._alock:
                if self._aconn is None or self._aconn.closed or self._aconn.broken:
                    # As in run: reconnect before sending, never resend after a lost reply.
                    self._drop_async()
                    self._aconn = await psycopg.AsyncConnection.connect(self._dsn(), autocommit=True)
                return await _afetch(self._aconn, query, params)
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc

    def _drop_async(self) -> None:
        if self._aconn is not None:
            if not self._aconn.closed:
                self._aconn.pgconn.finish()  # no await needed: closes the socket
            self._aconn = None

    def close(self) -> None:
        """Close the connections (the next statement without conn= reopens them)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._drop_async()


def _dropped(conn: psycopg.Connection[Any]) -> bool:
    """True when an idle connection's socket has something to read: the server closed it (or said why)."""
    if conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


def _fetch(conn: psycopg.Connection[Any], query: Any, params: Sequence[Any]) -> list[Any]:
    if isinstance(conn, psycopg.AsyncConnection):
        raise TypeError(
            "a psycopg.AsyncConnection goes with the async calls (enqueue_async, enqueue_many_async, "
            "cancel_async); these take a psycopg.Connection"
        )
    # Tuples whatever row factory the caller's connection uses.
    with conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute(query, params).fetchall()


async def _afetch(conn: psycopg.AsyncConnection[Any], query: Any, params: Sequence[Any]) -> list[Any]:
    if not isinstance(conn, psycopg.AsyncConnection):
        raise TypeError(f"the async calls take a psycopg.AsyncConnection, not {type(conn).__name__}")
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()
