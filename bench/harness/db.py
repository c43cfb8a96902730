"""Database chores around a measurement: empty the tables, ANALYZE, CHECKPOINT, count."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def connect(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection for the harness's own statements."""
    return psycopg.connect(dsn, autocommit=True)


def scalar(conn: psycopg.Connection[Any], query: str) -> Any:
    """The first column of the first row of ``query``."""
    row = conn.execute(query).fetchone()
    return None if row is None else row[0]


def reset(conn: psycopg.Connection[Any], tables: tuple[str, ...]) -> None:
    """Empty ``tables`` (schema-qualified names allowed) in one TRUNCATE, restarting their sequences."""
    if not tables:
        return
    names = [sql.Identifier(*name.split(".")) for name in tables]
    conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(sql.SQL(", ").join(names)))


def settle(conn: psycopg.Connection[Any], tables: tuple[str, ...]) -> list[str]:
    """ANALYZE the system's tables and CHECKPOINT, so no flush lands inside the timing.

    Returns notes about what could not be done (CHECKPOINT needs a superuser or
    pg_checkpoint on an existing server).
    """
    notes = []
    for name in tables:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(*name.split("."))))
    try:
        conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        notes.append("CHECKPOINT not permitted on this server")
    return notes
