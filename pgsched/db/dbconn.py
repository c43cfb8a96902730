"""Connections for long-running processes: opened with keepalives, reopened with backoff when they drop."""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import set_json_loads

log = logging.getLogger(__name__)

T = TypeVar("T")

# Half-open TCP connections (a cut network, a frozen server) are found in
# about 20 s instead of the kernel's two hours. Keepalives only probe an idle
# connection; tcp_user_timeout bounds a statement sent into a partition (data
# left unacknowledged) to 30 s instead of the kernel's ~15 minutes of retries.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 3,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
}


def connect_options(dsn: str, application_name: str) -> dict[str, Any]:
    """Keepalives, and an application_name that names the connection's job in pg_stat_activity
    (unless the DSN or PGAPPNAME already chose one)."""
    options: dict[str, Any] = dict(KEEPALIVES)
    try:
        chosen = "application_name" in psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        chosen = False  # connect() reports a bad DSN
    if not chosen and not os.environ.get("PGAPPNAME"):
        options["application_name"] = application_name[:63]
    return options


_decode = json.JSONDecoder().decode  # what json.loads(text) runs


class _TextJson:
    """json/jsonb values decoded from text in the connection's encoding: json.loads given bytes first
    guesses their encoding, which costs a claimed job's args more than parsing them. One per encoding,
    kept: psycopg keeps a loader per loads function."""

    __slots__ = ("codec",)

    def __init__(self, codec: str) -> None:
        self.codec = codec

    def __call__(self, data: str | bytes) -> Any:
        return _decode(data if isinstance(data, str) else str(data, self.codec))


_TEXT_JSON: dict[str, _TextJson] = {}


def _decode_json_as_text(conn: psycopg.Connection[Any]) -> None:
    codec = conn.info.encoding
    set_json_loads(_TEXT_JSON.setdefault(codec, _TextJson(codec)), conn)


class Reconnecting:
    """One autocommit connection that is reopened, with capped exponential backoff, when it fails.

    ``call(fn)`` runs fn(conn); on a connection-level failure it reconnects
    and raises, so the caller decides whether repeating fn is safe.
    """

    def __init__(
        self,
        dsn: str,
        *,
        purpose: str,
        stop: threading.Event,
        prepare: bool = True,
        max_backoff: float = 5.0,
    ) -> None:
        self.dsn = dsn
        self.purpose = purpose
        self.stop = stop
        self.prepare = prepare
        self.max_backoff = max_backoff
        self.conn: psycopg.Connection[Any] | None = None
        self._failures = 0

    def _open(self) -> psycopg.Connection[Any]:
        kwargs = connect_options(self.dsn, f"pgsched {self.purpose}")
        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10, **kwargs)
        if not self.prepare:
            conn.prepare_threshold = None
        _decode_json_as_text(conn)
        return conn

    def get(self) -> psycopg.Connection[Any]:
        """The open connection, reconnecting (and waiting between tries) until it works or stop is set."""
        while self.conn is None or self.conn.closed or self.conn.broken:
            if self.stop.is_set() and self._failures > 0:
                raise psycopg.OperationalError(f"{self.purpose}: stopping while disconnected")
            try:
                self.conn = self._open()
                if self._failures:
                    log.info("%s connection restored after %d failed tries", self.purpose, self._failures)
                self._failures = 0
            except psycopg.OperationalError as exc:
                self._failures += 1
                delay = min(self.max_backoff, 0.05 * 2 ** min(self._failures, 10)) * (0.5 + random.random() / 2)
                if self._failures in (1, 5) or self._failures % 50 == 0:
                    log.warning("%s: cannot connect (%s); retrying in %.2fs", self.purpose, exc, delay)
                self.stop.wait(delay)
        return self.conn

    def call(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        conn = self.get()
        try:
            return fn(conn)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self.discard()
            raise

    def discard(self) -> None:
        """Drop the connection; the next get() reconnects."""
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None

    def close(self) -> None:
        self.discard()
