"""pgsched.acquire_idle_shards: a worker's leases on the shards no scanner holds, fenced like a scanner's."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import psycopg
import pytest

from pgsched.db.dbconn import Reconnecting
from pgsched.runtime.expansion import Expander
from tests.sql.helpers import Conn
from tests.sql.test_roles import MakeRole, connect, make_role

__all__ = ["make_role"]  # the fixture, used here too

LEASE = timedelta(seconds=10)
SHARDS = 8


def idle(conn: Conn, holder: str, at: datetime) -> dict[int, int]:
    rows = conn.execute(
        "SELECT shard, epoch FROM pgsched.acquire_idle_shards(%s, %s, p_now => %s)", [holder, LEASE, at]
    ).fetchall()
    return {int(r["shard"]): int(r["epoch"]) for r in rows}


def scanner(conn: Conn, name: str, at: datetime) -> dict[int, int]:
    rows = conn.execute("SELECT shard, epoch FROM pgsched.acquire_shards(%s, %s, p_now => %s)", [name, LEASE, at])
    return {int(r["shard"]): int(r["epoch"]) for r in rows}


def file_nothing(conn: Conn, holder: str, shard: int, epoch: int, at: datetime) -> None:
    """An (empty) expansion written as `holder` under `epoch`: raises PS409 unless it holds the shard."""
    conn.execute(
        "SELECT pgsched.add_occurrences(%s, %s, %s, 'none', 1, '[]', %s, %s, %s)", [holder, shard, epoch, at, at, at]
    )


def test_a_worker_takes_the_idle_shards_and_gives_them_to_a_scanner(conn: Conn, now: datetime) -> None:
    first = idle(conn, "keeper:w1", now)
    assert first == dict.fromkeys(range(SHARDS), 1)
    assert idle(conn, "keeper:w2", now) == {}  # all held: one keeper is enough
    # The keeper is no scanner: a scanner's share is computed without it, and waits for the shards.
    assert scanner(conn, "scanner-1", now + timedelta(seconds=1)) == {}
    assert conn.execute("SELECT array_agg(name) AS n FROM pgsched.scanners").fetchone() == {"n": ["scanner-1"]}

    # A live scanner: the keeper gives everything back at its next renewal, and the scanner takes it.
    assert idle(conn, "keeper:w1", now + timedelta(seconds=2)) == {}
    assert scanner(conn, "scanner-1", now + timedelta(seconds=3)) == dict.fromkeys(range(SHARDS), 2)
    # What the keeper planned under its epoch is rejected.
    with pytest.raises(psycopg.Error) as raised:
        file_nothing(conn, "keeper:w1", 0, first[0], now + timedelta(seconds=4))
    assert raised.value.sqlstate == "PS409"


def test_a_lapsed_keeper_is_replaced_and_fenced(conn: Conn, now: datetime) -> None:
    held = idle(conn, "keeper:w1", now)
    file_nothing(conn, "keeper:w1", 3, held[3], now + timedelta(seconds=1))  # its own lease: accepted
    later = now + LEASE + timedelta(seconds=1)
    assert idle(conn, "keeper:w2", later) == dict.fromkeys(range(SHARDS), 2)
    with pytest.raises(psycopg.Error) as raised:
        file_nothing(conn, "keeper:w1", 3, held[3], later)
    assert raised.value.sqlstate == "PS409"
    assert idle(conn, "keeper:w1", later) == {}


def test_a_scanner_name_is_refused(conn: Conn, now: datetime) -> None:
    scanner(conn, "scanner-1", now)
    with pytest.raises(psycopg.Error) as raised:
        idle(conn, "scanner-1", now)
    assert raised.value.sqlstate == "22023"


def test_a_worker_only_login_expands_schedules(conn: Conn, make_role: MakeRole) -> None:
    conn.execute("SELECT pgsched.upsert_schedule('tick', '* * * * *', 't.tick')")
    role_dsn = make_role("pgsched_worker")
    with connect(role_dsn) as worker:
        rows = worker.execute(
            "SELECT shard, epoch FROM pgsched.acquire_idle_shards('keeper:w1', %s)", [LEASE]
        ).fetchall()
    epochs = {int(r["shard"]): int(r["epoch"]) for r in rows}
    db = Reconnecting(role_dsn, purpose="test", stop=threading.Event())
    try:
        result = Expander(db, "keeper:w1").run(epochs, budget=60)
    finally:
        db.close()
    assert (result.expanded, result.errors, result.lost) == (1, 0, {})
    assert result.created >= 59
