"""pgsched.ready, the due jobs' ring of slots, and pgsched.rotate_ready(), which turns it and empties drained slots.

Every rolled-back test of this folder also checks, at its end, that pgsched.ready holds exactly one row per due
job (tests/sql/conftest.py).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.sql.helpers import Conn, cancel, claim, db_now, enqueue, enqueue_many, refused, scalar
from tests.sql.test_roles import MakeRole, make_role  # noqa: F401  (a fixture)


def rotate(conn: Conn, period: str = "1 microsecond", move: int = 10000) -> list[tuple[int, str, Any]]:
    """What rotate_ready did; a slot it found locked ('busy': another session, such as autovacuum, held it
    past its 20 ms lock_timeout) is tried again, as the next call would, for up to 10 s."""
    done: list[tuple[int, str, Any]] = []
    deadline = time.monotonic() + 10.0
    while True:
        rows = conn.execute("SELECT * FROM pgsched.rotate_ready(%s::interval, %s)", (period, move)).fetchall()
        done += [(r["slot"], r["action"], r["moved"]) for r in rows]
        if all(r["action"] != "busy" for r in rows) or time.monotonic() > deadline:
            return done


def open_slot(conn: Conn) -> int:
    return int(scalar(conn, "SELECT slot FROM pgsched.ready_ring WHERE closed_at IS NULL"))


def slots_of(conn: Conn, ids: list[int]) -> set[int]:
    return {r["slot"] for r in conn.execute("SELECT slot FROM pgsched.ready WHERE id = ANY (%s)", (ids,)).fetchall()}


def pages(conn: Conn, slot: int) -> int:
    return int(scalar(conn, "SELECT pg_relation_size(format('pgsched.ready_s%%s', %s::int)::regclass)", (slot,)))


def test_due_jobs_enter_the_open_slot_and_the_ring_turns_after_its_period(conn: Conn) -> None:
    first = open_slot(conn)
    ids = enqueue_many(conn, ["t"] * 3)
    assert slots_of(conn, ids) == {first}
    assert rotate(conn, period="1 hour") == []  # not yet: the slot (opened at install) has not had its hour
    assert open_slot(conn) == first
    opened = [r for r in rotate(conn) if r[1] == "opened"]
    assert len(opened) == 1
    assert opened[0][0] == open_slot(conn) != first
    later = enqueue(conn)
    assert slots_of(conn, [later]) == {open_slot(conn)}
    assert {r["id"] for r in claim(conn, 10)} == {*ids, later}


def test_jobs_not_due_have_no_row_until_they_are(conn: Conn) -> None:
    future = enqueue(conn, run_at="2999-01-01T00:00:00Z")
    assert slots_of(conn, [future]) == set()
    conn.execute("SELECT pgsched.promote_due(p_now => '2999-01-02T00:00:00Z')")
    assert len(slots_of(conn, [future])) == 1


def test_a_drained_slot_is_emptied_whole(conn: Conn) -> None:
    ids = enqueue_many(conn, ["t"] * 50)
    (slot,) = slots_of(conn, ids)
    rotate(conn)  # another slot opens
    assert len(claim(conn, 100)) == 50
    assert pages(conn, slot) > 0  # dead rows, until the slot is emptied
    assert (slot, "emptied", 0) in rotate(conn)
    assert pages(conn, slot) == 0


def test_a_closed_slot_is_emptied_as_soon_as_its_jobs_are_claimed_but_keeps_due_ones_for_its_period(
    conn: Conn,
) -> None:
    ids = enqueue_many(conn, ["t"] * 3)
    (slot,) = slots_of(conn, ids)
    rotate(conn)  # closed now
    assert rotate(conn, period="1 hour") == []  # its due jobs stay put until it was closed an hour ago
    assert slots_of(conn, ids) == {slot}
    assert len(claim(conn, 10)) == 3
    assert (slot, "emptied", 0) in rotate(conn, period="1 hour")  # drained: no need to wait
    assert pages(conn, slot) == 0


def test_due_jobs_left_in_a_closed_slot_move_to_the_open_one(conn: Conn) -> None:
    ids = enqueue_many(conn, ["t"] * 3)
    (slot,) = slots_of(conn, ids)
    rotate(conn)
    into = open_slot(conn)
    assert (slot, "emptied", 3) in rotate(conn)
    assert slots_of(conn, ids) == {into}
    assert {r["id"] for r in claim(conn, 10)} == set(ids)


def test_a_slot_with_more_due_jobs_than_p_move_is_kept(conn: Conn) -> None:
    ids = enqueue_many(conn, ["t"] * 5)
    (slot,) = slots_of(conn, ids)
    rotate(conn)
    assert (slot, "kept", 3) in rotate(conn, move=2)
    assert slots_of(conn, ids) == {slot}


def test_rows_of_jobs_no_longer_due_are_dropped_by_the_claim_and_the_rotation(conn: Conn) -> None:
    running = enqueue(conn)
    claim(conn, 1)
    stray = (
        "INSERT INTO pgsched.ready (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority,"
        " labels) SELECT %s, 'default', '', 0, '2000-01-01', j.id, j.shard, 0, '{}' FROM pgsched.jobs j WHERE j.id = %s"
    )
    conn.execute(stray, (open_slot(conn), running))
    assert claim(conn, 10) == []  # it skips the row, and removes it
    assert slots_of(conn, [running]) == set()
    conn.execute(stray, (open_slot(conn), running))
    (slot,) = slots_of(conn, [running])
    rotate(conn)
    assert (slot, "emptied", 0) in rotate(conn)
    assert slots_of(conn, [running]) == set()


def test_a_cancelled_or_moved_job_takes_its_row_along(conn: Conn) -> None:
    gone, moved = enqueue(conn), enqueue(conn, idempotency_key=f"k{secrets.token_hex(4)}")
    assert cancel(conn, gone) == "cancelled"
    conn.execute("UPDATE pgsched.jobs SET priority = 7 WHERE id = %s", (moved,))
    rows = conn.execute("SELECT id, priority, dispatch_rank FROM pgsched.ready").fetchall()
    assert rows == [{"id": moved, "priority": 7, "dispatch_rank": -7}]


def test_rotate_ready_checks_its_arguments(conn: Conn) -> None:
    with refused("22023"):
        rotate(conn, period="0 seconds")
    with refused("22023"):
        rotate(conn, move=-1)


@pytest.fixture
def pinned(dsn: str) -> Iterator[None]:
    """A session idle in a transaction that took an xid: VACUUM can remove no row version that dies after it."""
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_current_xact_id()")
        yield
        holder.rollback()


def test_a_pinned_horizon_does_not_keep_the_dead_rows_of_claimed_jobs(dsn: str, pinned: None) -> None:
    """The point of the ring: with the horizon held, VACUUM removes nothing, yet the slot's files go whole."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        ids = enqueue_many(c, ["t"] * 500)
        (slot,) = slots_of(c, ids)
        rotate(c)
        while claim(c, 100):
            pass
        c.execute(f"VACUUM pgsched.ready_s{slot}")
        assert pages(c, slot) > 0  # nothing removable: the horizon is held
        assert (slot, "emptied", 0) in rotate(c)
        assert pages(c, slot) == 0


def test_a_slot_someone_holds_a_lock_on_is_left_for_later_without_waiting(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c, psycopg.connect(dsn) as reader:
        ids = enqueue_many(c, ["t"] * 3)
        (slot,) = slots_of(c, ids)
        rotate(c)
        claim(c, 10)
        reader.execute(f"SELECT count(*) FROM pgsched.ready_s{slot}")  # holds ACCESS SHARE until it ends
        assert (slot, "busy", None) in rotate(c)
        reader.rollback()
        assert (slot, "emptied", 0) in rotate(c)


def test_only_workers_turn_the_ring(conn: Conn, make_role: MakeRole) -> None:  # noqa: F811
    del conn
    with psycopg.connect(make_role("pgsched_enqueue"), autocommit=True) as c:
        with refused("42501"):
            c.execute("SELECT * FROM pgsched.rotate_ready()")
        with refused("42501"):
            c.execute("DELETE FROM pgsched.ready")
        with refused("42501"):
            c.execute(
                "INSERT INTO pgsched.ready (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard,"
                " priority, labels) VALUES (0, 'q', '', 0, now(), 1, 0, 0, '{}')"
            )
        c.execute("SELECT * FROM pgsched.ready")  # what pgsched.jobs shows it anyway
    with psycopg.connect(make_role("pgsched_worker"), autocommit=True) as c:
        c.execute("SELECT * FROM pgsched.rotate_ready()")


def test_a_tenant_bound_worker_sees_only_its_tenants_due_rows(dsn: str, make_role: MakeRole) -> None:  # noqa: F811
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        mine, theirs = enqueue(c, tenant="A"), enqueue(c, tenant="B")
    with psycopg.connect(make_role("pgsched_worker", tenant="A"), autocommit=True) as c:
        assert [r[0] for r in c.execute("SELECT id FROM pgsched.ready").fetchall()] == [mine]
        assert theirs != mine


def test_a_ring_emptied_by_hand_still_takes_due_jobs_and_is_set_up_again(conn: Conn) -> None:
    conn.execute("DELETE FROM pgsched.ready_ring")
    job = enqueue(conn)
    assert slots_of(conn, [job]) == {0}
    rotate(conn, period="1 hour")
    assert int(scalar(conn, "SELECT count(*) FROM pgsched.ready_ring")) == 8
    assert open_slot(conn) == 0
    assert [r["id"] for r in claim(conn, 1)] == [job]


def test_truncating_the_jobs_empties_their_due_rows(conn: Conn) -> None:
    enqueue_many(conn, ["t"] * 3)
    conn.execute("TRUNCATE pgsched.jobs")
    assert int(scalar(conn, "SELECT count(*) FROM pgsched.ready")) == 0
    later = enqueue(conn)
    assert [r["id"] for r in claim(conn, 5)] == [later]


def test_truncating_the_jobs_and_their_due_rows_in_one_statement_works(conn: Conn) -> None:
    enqueue_many(conn, ["t"] * 3)
    conn.execute("TRUNCATE pgsched.jobs, pgsched.ready")
    assert int(scalar(conn, "SELECT count(*) FROM pgsched.ready")) == 0


def what_a_crash_leaves(conn: Conn) -> None:
    """A crash (or a standby's promotion) resets every unlogged table: the ring's slots and its mark, empty."""
    conn.execute("TRUNCATE pgsched.ready, pgsched.ready_intact")


def test_the_rings_slots_and_its_mark_are_unlogged_and_the_jobs_are_not(conn: Conn) -> None:
    rows = conn.execute(
        "SELECT c.relname, c.relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgsched' AND c.relkind = 'r'"
        "   AND (c.relname LIKE 'ready%%' OR c.relname LIKE 'jobs%%' OR c.relname LIKE 'job_history%%')"
    ).fetchall()
    persistence = {r["relname"]: r["relpersistence"] for r in rows}
    assert {name for name, p in persistence.items() if p == "u"} == {f"ready_s{s}" for s in range(8)} | {"ready_intact"}
    assert persistence["ready_ring"] == "p"
    assert all(p == "p" for name, p in persistence.items() if name.startswith("job"))
    assert int(scalar(conn, "SELECT count(*) FROM pgsched.ready_intact")) == 1


def test_a_claim_after_a_crash_fills_the_ring_again_and_claims_every_due_job_in_order(conn: Conn) -> None:
    low = enqueue(conn, priority=0)
    high = enqueue(conn, priority=5)
    later = enqueue(conn, run_at=db_now(conn) + timedelta(hours=1))
    elsewhere = enqueue(conn, queue="other")
    what_a_crash_leaves(conn)
    assert [r["id"] for r in claim(conn, 10)] == [high, low]
    assert int(scalar(conn, "SELECT count(*) FROM pgsched.ready_intact")) == 1
    # The other queue's due job has its row again; the scheduled one has none until it is due.
    assert [r["id"] for r in conn.execute("SELECT id FROM pgsched.ready").fetchall()] == [elsewhere]
    assert [r["id"] for r in claim(conn, 10, queues=["default", "other"])] == [elsewhere]
    assert scalar(conn, "SELECT state FROM pgsched.jobs WHERE id = %s", (later,)) == "scheduled"


def test_rotate_ready_after_a_crash_fills_the_ring_for_workers_that_do_not_claim_yet(conn: Conn) -> None:
    ids = enqueue_many(conn, ["t"] * 3)
    what_a_crash_leaves(conn)
    rotate(conn, period="1 hour")
    assert sorted(r["id"] for r in conn.execute("SELECT id FROM pgsched.ready").fetchall()) == sorted(ids)
    assert slots_of(conn, ids) == {open_slot(conn)}
    assert int(scalar(conn, "SELECT count(*) FROM pgsched.ready_intact")) == 1


def test_filling_the_ring_again_adds_no_second_row_for_a_job_that_has_one(conn: Conn) -> None:
    ids = enqueue_many(conn, ["t"] * 3)
    conn.execute("TRUNCATE pgsched.ready_intact")
    assert scalar(conn, "SELECT pgsched._rebuild_ready()") == 0
    assert int(scalar(conn, "SELECT count(*) FROM pgsched.ready")) == 3
    assert scalar(conn, "SELECT pgsched._rebuild_ready()") is None  # intact: nothing to do
    assert sorted(r["id"] for r in claim(conn, 10)) == sorted(ids)
