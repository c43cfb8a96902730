"""Status events: one NOTIFY on pgsched_events per terminal transition, and the gap-free stream (read_events)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.sql.helpers import Conn, cancel, claim, claim_one, complete, enqueue, fail, pair, refused

PAYLOAD_KEYS = {"id", "queue", "task", "state", "attempt"}


@pytest.fixture
def listening(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgsched_events")
        yield listener


def events_until_marker(listener: psycopg.Connection[Any], conn: Conn) -> list[dict[str, Any]]:
    """Every pgsched_events payload delivered before a marker sent now: what was sent, and nothing else.

    Notifications of one sender arrive in commit order, so once the marker
    is in, whatever was committed before it is in too (no waiting on a clock).
    """
    conn.execute("SELECT pg_notify('pgsched_events', 'marker')")
    got = []
    for note in listener.notifies(timeout=10.0):
        if note.payload == "marker":
            return got
        got.append(json.loads(note.payload))
    pytest.fail(f"the marker never arrived; got {got}")


def test_each_completed_job_sends_its_event_without_args_or_results(conn: Conn, listening: Any) -> None:
    ids = [enqueue(conn, "mail.send", {"password": "hunter2"}, queue="mail") for _ in range(3)]
    jobs = claim(conn, 10, queues=["mail"])
    accepted = complete(conn, [pair(j) for j in jobs], results=[{"secret": "s3cr3t"}] * len(jobs))
    assert all(accepted.values())

    got = events_until_marker(listening, conn)
    assert sorted(e["id"] for e in got) == sorted(ids)
    for event in got:
        assert set(event) == PAYLOAD_KEYS
        assert event == {"id": event["id"], "queue": "mail", "task": "mail.send", "state": "completed", "attempt": 1}
    raw = json.dumps(got)
    assert "hunter2" not in raw
    assert "s3cr3t" not in raw


def test_a_stale_completion_sends_nothing(conn: Conn, listening: Any) -> None:
    enqueue(conn)
    job = claim_one(conn)
    assert complete(conn, [(job["id"], job["lease_token"] + 1)]) == {job["id"]: False}
    assert events_until_marker(listening, conn) == []


def test_dead_and_cancelled_jobs_send_their_events(conn: Conn, listening: Any) -> None:
    dead = enqueue(conn, "t", max_attempts=1)
    job = claim_one(conn)
    assert fail(conn, job["id"], job["lease_token"], "Traceback: secret detail") == "dead"
    waiting = enqueue(conn, "t", {"x": 1}, run_at=None)
    assert cancel(conn, waiting) == "cancelled"
    running = enqueue(conn, "t", max_attempts=3)
    job = claim_one(conn)
    assert cancel(conn, running) == "cancel_requested"
    assert fail(conn, job["id"], job["lease_token"], "stopped") == "cancelled"

    got = events_until_marker(listening, conn)
    assert [(e["id"], e["state"], e["attempt"]) for e in got] == [
        (dead, "dead", 1),
        (waiting, "cancelled", 0),
        (running, "cancelled", 1),
    ]
    assert "secret" not in json.dumps(got)


def test_a_retry_is_not_an_event(conn: Conn, listening: Any) -> None:
    enqueue(conn, "t", max_attempts=3)
    job = claim_one(conn)
    assert fail(conn, job["id"], job["lease_token"]) in ("scheduled", "available")
    assert events_until_marker(listening, conn) == []


def test_events_can_be_turned_off(conn: Conn, listening: Any) -> None:
    conn.execute("UPDATE pgsched.config SET events = false")
    enqueue(conn)
    enqueue(conn, max_attempts=1)
    first, second = sorted(claim(conn, 2), key=lambda j: j["id"])
    complete(conn, [pair(first)])
    assert fail(conn, second["id"], second["lease_token"]) == "dead"
    assert events_until_marker(listening, conn) == []
    # The record is still there for the stream.
    assert len(conn.execute("SELECT * FROM pgsched.read_events(0)").fetchall()) == 2


def test_a_rolled_back_completion_sends_nothing(dsn: str, conn: Conn, listening: Any) -> None:
    enqueue(conn)
    job = claim_one(conn)
    with psycopg.connect(dsn, row_factory=dict_row) as tx:
        assert complete(tx, [pair(job)]) == {job["id"]: True}
        tx.rollback()
    assert events_until_marker(listening, conn) == []


def read(conn: Conn, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
    return conn.execute("SELECT * FROM pgsched.read_events(%s, %s)", [after, limit]).fetchall()


def test_read_events_waits_for_a_transaction_that_commits_late(dsn: str, conn: Conn) -> None:
    # The race a sequence or a timestamp loses: A finishes a job first but
    # commits last; a reader that already passed B's row must still see A's.
    enqueue(conn)
    enqueue(conn)
    a_job, b_job = claim(conn, 2)
    with psycopg.connect(dsn, row_factory=dict_row) as a:
        complete(a, [pair(a_job)])  # A holds its transaction id, uncommitted
        complete(conn, [pair(b_job)])  # B commits
        assert read(conn) == [], "B's event must wait until A, older, has ended"
        a.commit()
    rows = read(conn)
    assert [r["id"] for r in rows] == [a_job["id"], b_job["id"]]
    assert rows[0]["pos"] < rows[1]["pos"]
    assert {r["state"] for r in rows} == {"completed"}
    assert read(conn, rows[-1]["pos"]) == []


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_read_events_resumes_from_a_position_and_never_splits_a_transaction(conn: Conn) -> None:
    for _ in range(8):
        enqueue(conn)
    jobs = claim(conn, 8)
    complete(conn, [pair(j) for j in jobs[:5]])  # one transaction of five
    complete(conn, [pair(j) for j in jobs[5:]])  # one of three
    first = read(conn, 0, limit=2)
    assert len(first) == 5
    assert len({r["pos"] for r in first}) == 1
    rest = read(conn, first[-1]["pos"], limit=2)
    assert [r["id"] for r in rest] == sorted(j["id"] for j in jobs[5:])
    assert read(conn, rest[-1]["pos"]) == []
    assert {r["id"] for r in first + rest} == {j["id"] for j in jobs}


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_read_events_carries_the_error_of_a_dead_job(conn: Conn) -> None:
    enqueue(conn, max_attempts=1)
    job = claim_one(conn)
    fail(conn, job["id"], job["lease_token"], "it broke")
    (row,) = read(conn)
    assert (row["id"], row["state"], row["attempt"], row["error"]) == (job["id"], "dead", 1, "it broke")


def burn_transaction_ids(conn: Conn, n: int) -> None:
    """n transactions that each take an id and end: positions no history row has."""
    conn.execute(
        "CREATE OR REPLACE PROCEDURE pg_temp.burn(n integer) LANGUAGE plpgsql AS $$"
        " BEGIN FOR i IN 1 .. n LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
    )
    conn.execute("CALL pg_temp.burn(%s)", [n])


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_read_events_reads_past_wide_gaps_between_positions(conn: Conn) -> None:
    # The stream reads a window of positions at a time and widens it until it
    # holds a batch: a reader far behind (or a quiet queue beside a busy
    # cluster) must still get every event, in order, batch by batch.
    for _ in range(3):
        enqueue(conn)
    jobs = claim(conn, 3)
    for job in jobs:
        burn_transaction_ids(conn, 9_000)  # wider than the first windows (64, 256, ... positions)
        complete(conn, [pair(job)])
    burn_transaction_ids(conn, 9_000)
    everything = read(conn, 0, limit=10)
    assert [r["id"] for r in everything] == [j["id"] for j in jobs]
    seen, after = [], 0
    while batch := read(conn, after, limit=1):
        assert len(batch) == 1
        seen.append(batch[0]["id"])
        after = batch[0]["pos"]
    assert seen == [j["id"] for j in jobs]
    assert everything[1]["pos"] - everything[0]["pos"] > 9_000


def test_read_events_refuses_a_negative_position(conn: Conn) -> None:
    with refused("22023"):
        read(conn, -1)


# -- who reads the stream --------------------------------------------------


@pytest.fixture
def login_role(dsn: str, admin_dsn: str) -> Iterator[Callable[..., str]]:
    """login_role('pgsched_enqueue', ...): the DSN of a new LOGIN role granted exactly those roles."""
    created: list[str] = []

    def make(*granted: str) -> str:
        name, password = f"pgsched_test_{secrets.token_hex(6)}", secrets.token_hex(12)
        with psycopg.connect(dsn, autocommit=True) as owner:
            owner.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), password))
            created.append(name)
            for role in granted:
                owner.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(name)))
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        info.update(user=name, password=password)
        return psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})

    yield make
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        for name in created:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [name])
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_the_stream_is_confined_to_the_tenant_of_a_scoped_role(conn: Conn, login_role: Callable[..., str]) -> None:
    finished = {}
    for tenant in ("A", "B"):
        enqueue(conn, queue=f"q{tenant}", tenant=tenant)
        job = claim_one(conn, queues=[f"q{tenant}"])
        complete(conn, [pair(job)])
        finished[tenant] = job["id"]
    with psycopg.connect(login_role("pgsched_enqueue"), autocommit=True, row_factory=dict_row) as plain:
        assert {r["id"] for r in read(plain)} == set(finished.values())
    scoped_dsn = login_role("pgsched_enqueue", "pgsched_tenant_scoped")
    with psycopg.connect(scoped_dsn, autocommit=True, row_factory=dict_row) as scoped:
        assert read(scoped) == []  # scoped, not bound to a tenant: nothing
    role = psycopg.conninfo.conninfo_to_dict(scoped_dsn)["user"]
    conn.execute("SELECT pgsched.bind_tenant(%s::regrole, 'A')", [role])
    with psycopg.connect(scoped_dsn, autocommit=True, row_factory=dict_row) as scoped:
        assert [r["id"] for r in read(scoped)] == [finished["A"]]


def test_a_role_without_pgsched_grants_cannot_read_the_stream(login_role: Callable[..., str]) -> None:
    with psycopg.connect(login_role(), autocommit=True, row_factory=dict_row) as stranger, refused("42501"):
        read(stranger)
