"""Reading from a streaming replica (``--read-dsn``): whether the server is one, and how far behind it is."""

from __future__ import annotations

from typing import Any, Final, LiteralString

import psycopg
from psycopg.rows import dict_row

from pgsched.errors import ConfigurationError

# lag_s: 0 when everything received has been replayed, else the age of the last replayed commit;
# NULL on a primary. replay_age_s: the age of the last replayed commit (grows while the primary is idle),
# NULL on a primary.
REPLICA_SQL: Final[LiteralString] = """
SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
       CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN NULL
            WHEN pg_catalog.pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_catalog.pg_last_wal_replay_lsn() THEN 0.0
            ELSE extract(epoch FROM pg_catalog.now() - pg_catalog.pg_last_xact_replay_timestamp())::float8
       END AS lag_s,
       CASE WHEN pg_catalog.pg_is_in_recovery()  -- a promoted primary still reports its last replay
            THEN extract(epoch FROM pg_catalog.now() - pg_catalog.pg_last_xact_replay_timestamp())::float8
       END AS replay_age_s
"""


# What a streaming replica shares with its primary: the cluster's system identifier (when the role may read the
# control file: superusers and pg_monitor members), the database's name and oid.
IDENTITY_SQL: Final[LiteralString] = """
SELECT pg_catalog.current_database() AS database,
       (SELECT d.oid::bigint FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()) AS oid,
       CASE WHEN pg_catalog.has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')
            THEN (SELECT c.system_identifier::text FROM pg_catalog.pg_control_system() c)
       END AS system
"""


def identity(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """{'database', 'oid', 'system'} of the database conn is on ('system' None when the role may not read it)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(IDENTITY_SQL).fetchone()
    assert row is not None
    return dict(row)


def check_same_database(primary: psycopg.Connection[Any], read: psycopg.Connection[Any]) -> None:
    """Refuse a --read-dsn that is not the --dsn database or a streaming copy of it (another database, another
    cluster): its numbers would be shown as this database's."""
    ours, theirs = identity(primary), identity(read)
    systems_differ = None not in (ours["system"], theirs["system"]) and ours["system"] != theirs["system"]
    if systems_differ or (ours["database"], ours["oid"]) != (theirs["database"], theirs["oid"]):
        where = f"database {theirs['database']!r}" + (f" of cluster {theirs['system']}" if theirs["system"] else "")
        raise ConfigurationError(
            f"--read-dsn is {where}, not the --dsn database {ours['database']!r}"
            + (f" of cluster {ours['system']}" if ours["system"] else "")
            + " or a streaming replica of it"
        )


def replica_state(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """{'in_recovery': bool, 'lag_s': float | None, 'replay_age_s': float | None} for the server of conn."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(REPLICA_SQL).fetchone()
    assert row is not None
    return dict(row)


async def replica_state_async(conn: psycopg.AsyncConnection[Any]) -> dict[str, Any]:
    """replica_state for an asyncio connection."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(REPLICA_SQL)
        row = await cur.fetchone()
    assert row is not None
    return dict(row)


def describe(state: dict[str, Any]) -> str:
    """One line for people: 'read from the primary' or 'read from a replica, 1.2 s behind'."""
    if not state["in_recovery"]:
        return "read from the primary (--read-dsn is not a replica)"
    lag = state["lag_s"]
    behind = "lag unknown (nothing replayed yet)" if lag is None else f"{lag:.1f} s behind"
    return f"read from a replica, {behind}"
