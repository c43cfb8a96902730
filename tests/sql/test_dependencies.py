"""Job dependencies: enqueue(depends_on), enqueue_many references, release on the last completion, failure policies."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import psycopg
from psycopg.rows import dict_row

from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    complete,
    count,
    enqueue,
    enqueue_many,
    fail,
    history,
    pair,
    refused,
    retry,
    scalar,
    state,
)


def run(conn: Conn, job_id: int, now: datetime | None = None) -> None:
    """Claim exactly this job (it must be the only one due) and complete it."""
    got = claim_one(conn, now=now)
    assert got["id"] == job_id
    assert complete(conn, [pair(got)], now=now) == {job_id: True}


def edges(conn: Conn) -> list[tuple[int, int]]:
    rows = conn.execute("SELECT depends_on, job FROM pgsched.job_dependencies ORDER BY 1, 2").fetchall()
    return [(r["depends_on"], r["job"]) for r in rows]


def test_a_dependent_waits_and_is_due_in_the_transaction_of_the_last_completion(conn: Conn) -> None:
    a = enqueue(conn, "a")
    b = enqueue(conn, "b")
    c = enqueue(conn, "c", depends_on=[a, b])
    assert state(conn, c) == "waiting"
    assert sorted(r["id"] for r in claim(conn, 10)) == [a, b]  # never c
    ta, tb = (
        scalar(conn, "SELECT lease_token FROM pgsched.jobs WHERE id = %s", [a]),
        scalar(conn, "SELECT lease_token FROM pgsched.jobs WHERE id = %s", [b]),
    )
    assert complete(conn, [(a, ta)]) == {a: True}
    assert state(conn, c) == "waiting"
    assert claim(conn, 10) == []
    with conn.transaction():
        assert complete(conn, [(b, tb)]) == {b: True}
        assert state(conn, c) == "available"  # inside the completing transaction
    assert edges(conn) == []
    assert claim_one(conn)["id"] == c


def test_a_completed_dependency_is_met_at_enqueue_and_an_unknown_one_is_refused(conn: Conn) -> None:
    a = enqueue(conn, "a")
    run(conn, a)
    b = enqueue(conn, "b", depends_on=[a])
    assert state(conn, b) == "available"
    with refused("23503"):
        enqueue(conn, "c", depends_on=[a, 987654])
    with refused("22023"):
        enqueue(conn, "c", depends_on=[a, None])
    with refused("22023"):
        enqueue(conn, "c", depends_on=[a], on_dependency_failure="ignore")
    assert count(conn) == 1  # only b: nothing of the refused ones


def test_a_future_run_at_waits_for_both(conn: Conn, now: datetime) -> None:
    a = enqueue(conn, "a")
    b = enqueue(conn, "b", depends_on=[a], run_at=now + timedelta(hours=1))
    run(conn, a)
    assert state(conn, b) == "scheduled"


def test_a_dead_dependency_cancels_its_dependents_down_the_graph(conn: Conn) -> None:
    a = enqueue(conn, "a", max_attempts=1)
    b = enqueue(conn, "b", depends_on=[a])
    c = enqueue(conn, "c", depends_on=[b])
    w = enqueue(conn, "w", depends_on=[a], on_dependency_failure="wait")
    got = claim_one(conn)
    assert fail(conn, a, got["lease_token"]) == "dead"
    assert [(h["state"], h["error"]) for h in history(conn, b)] == [("cancelled", f"dependency {a} dead")]
    assert [(h["state"], h["error"]) for h in history(conn, c)] == [("cancelled", f"dependency {b} cancelled")]
    assert state(conn, w) == "waiting"
    assert edges(conn) == [(a, w)]
    # a redrive of the dead dependency, once it completes, releases the one that waits
    assert retry(conn, a) == "retried"
    assert state(conn, w) == "waiting"
    run(conn, a)
    assert state(conn, w) == "available"


def test_a_stale_completion_of_a_job_that_died_releases_nothing(conn: Conn, now: datetime) -> None:
    a = enqueue(conn, "a", max_attempts=1)
    w = enqueue(conn, "w", depends_on=[a], on_dependency_failure="wait")
    got = claim_one(conn)
    assert fail(conn, a, got["lease_token"]) == "dead"
    assert complete(conn, [pair(got)]) == {a: False}
    assert state(conn, w) == "waiting"


def test_depending_on_a_dead_or_cancelled_job_applies_the_policy_at_once(conn: Conn) -> None:
    a = enqueue(conn, "a")
    assert cancel(conn, a) == "cancelled"
    b = enqueue(conn, "b", depends_on=[a])
    assert state(conn, b) == "cancelled"
    assert count(conn) == 0
    assert [(h["state"], h["error"]) for h in history(conn, b)] == [("cancelled", f"dependency {a} cancelled")]
    w = enqueue(conn, "w", depends_on=[a], on_dependency_failure="wait")
    assert state(conn, w) == "waiting"
    assert retry(conn, a) == "retried"
    run(conn, a)
    assert state(conn, w) == "available"


def test_cancelling_a_waiting_job_drops_its_dependencies_and_cancels_its_dependents(conn: Conn) -> None:
    a = enqueue(conn, "a")
    b = enqueue(conn, "b", depends_on=[a])
    c = enqueue(conn, "c", depends_on=[b])
    assert cancel(conn, b) == "cancelled"
    assert state(conn, c) == "cancelled"
    assert edges(conn) == []
    assert retry(conn, c) == "retried"  # a redriven dependent runs: its dependencies are gone with it
    assert state(conn, c) == "available"


def test_a_batch_is_a_graph_with_references_to_earlier_rows(conn: Conn) -> None:
    a = enqueue(conn, "a")
    run(conn, a)
    ids = enqueue_many(conn, ["x", "y", "z", "u"], depends_on=[[], [-1], [-1, -2, a], None])
    x, y, z, u = ids
    assert [state(conn, i) for i in ids] == ["available", "waiting", "waiting", "available"]
    assert edges(conn) == [(x, y), (x, z), (y, z)]
    due = {r["id"]: r["lease_token"] for r in claim(conn, 10)}
    assert sorted(due) == [x, u]
    assert complete(conn, [(x, due[x])]) == {x: True}
    assert state(conn, y) == "available"
    assert state(conn, z) == "waiting"


def test_a_batch_refuses_forward_references_and_unknown_ids_naming_the_row(conn: Conn) -> None:
    with refused("22023") as info:
        enqueue_many(conn, ["x", "y", "z"], depends_on=[[], [-3], []])
    assert "row 2 of the batch" in str(info.value)
    assert "refers to row 3" in str(info.value)
    with refused("22023") as info:
        enqueue_many(conn, ["x", "y"], depends_on=[[], [-2]])  # itself: a cycle
    assert "row 2 of the batch" in str(info.value)
    with refused("22023") as info:
        enqueue_many(conn, ["x", "y"], depends_on=[[], ["one"]])
    assert "row 2 of the batch" in str(info.value)
    with refused("23503") as info:
        enqueue_many(conn, ["x", "y", "z"], depends_on=[[], [-1], [424242]])
    assert "row 3 of the batch" in str(info.value)
    assert "424242" in str(info.value)
    with refused("22023") as info:
        enqueue_many(conn, ["x", "y"], depends_on=[[], [-1]], on_dependency_failure=[None, "later"])
    assert "row 2 of the batch" in str(info.value)
    assert count(conn) == 0
    assert edges(conn) == []


def next_job_id(conn: Conn) -> int:
    """The id the next enqueue will draw (the sequence is not cached: ids come one by one)."""
    return int(scalar(conn, "SELECT pg_catalog.nextval('pgsched.jobs_id_seq')")) + 1


def test_no_job_depends_on_its_own_or_a_later_id(conn: Conn) -> None:
    """Ids are drawn in order, so edges that point only to smaller ids make a cycle impossible."""
    earlier = enqueue(conn, "x")
    own = next_job_id(conn)
    with refused("22023") as info:
        enqueue(conn, "y", depends_on=[earlier, own])  # its own predicted id
    assert f"depends_on {own}" in str(info.value)
    assert "enqueued before it" in str(info.value)
    first = next_job_id(conn)
    with refused("22023") as info:
        # a two-row batch naming each other's predicted ids: each would wait for the other for ever
        enqueue_many(conn, ["a", "b"], depends_on=[[first + 1], [first]])
    assert "row 1 of the batch" in str(info.value)
    first = next_job_id(conn)
    with refused("22023") as info:
        enqueue_many(conn, ["a", "b", "c"], depends_on=[[], [first + 2], []])  # a row after it, by its id
    assert "row 2 of the batch" in str(info.value)
    assert count(conn) == 1
    assert edges(conn) == []
    # an earlier row of the same batch named by its id is an edge backwards, as a reference is
    start = next_job_id(conn)
    a, b = enqueue_many(conn, ["a", "b"], depends_on=[[], [start]])
    assert (a, b) == (start, start + 1)
    assert edges(conn) == [(a, b)]


def test_a_job_names_at_most_1000_dependencies(conn: Conn) -> None:
    ids = enqueue_many(conn, ["x"] * 1000)
    many = enqueue(conn, "y", depends_on=ids)
    assert state(conn, many) == "waiting"
    assert len(edges(conn)) == 1000
    before = count(conn)
    with refused("22023") as info:
        enqueue(conn, "y", depends_on=list(range(1, 50_001)))
    assert "at most 1000" in str(info.value)
    with refused("22023") as info:
        enqueue_many(conn, ["y", "z"], depends_on=[[-1], [*ids, ids[0] - 1]])
    assert "row 2 of the batch" in str(info.value)
    assert "at most 1000" in str(info.value)
    # a batch names at most 1000 distinct jobs outside it (each is held until the enqueue commits)
    with refused("22023") as info:
        enqueue_many(conn, ["y", "z"], depends_on=[ids[:600], [*ids[400:], many]])
    assert "at most 1000" in str(info.value)
    assert count(conn) == before


def test_a_batch_row_whose_key_is_held_stands_for_the_holder(conn: Conn) -> None:
    held = enqueue(conn, "x", idempotency_key="k1")
    x, y = enqueue_many(conn, ["x", "y"], idempotency_keys=["k1", None], depends_on=[[], [-1]])
    assert x == held
    assert edges(conn) == [(held, y)]


def test_a_failed_row_of_a_batch_cancels_its_dependents_in_the_batch(conn: Conn) -> None:
    a = enqueue(conn, "a")
    assert cancel(conn, a) == "cancelled"
    x, y, z = enqueue_many(
        conn, ["x", "y", "z"], depends_on=[[a], [-1], [-1]], on_dependency_failure=[None, None, "wait"]
    )
    assert [h["error"] for h in history(conn, x)] == [f"dependency {a} cancelled"]
    assert [h["error"] for h in history(conn, y)] == [f"dependency {x} cancelled"]
    assert state(conn, z) == "waiting"


def test_a_long_chain_cancels_without_recursion(conn: Conn) -> None:
    n = 1500
    ids = enqueue_many(conn, ["a"] + ["b"] * (n - 1), depends_on=[[]] + [[-i] for i in range(1, n)])
    assert cancel(conn, ids[0]) == "cancelled"
    assert count(conn) == 0
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history WHERE state = 'cancelled'") == n


def test_the_last_two_dependencies_completing_at_once_release_the_dependent(conn: Conn, dsn: str) -> None:
    """Two transactions each complete one of the two dependencies: the second waits for the first's
    commit (on the dependent's row) and then sees it, so the dependent is released, never stranded."""
    a = enqueue(conn, "a")
    b = enqueue(conn, "b")
    c = enqueue(conn, "c", depends_on=[a, b])
    jobs = {r["id"]: r["lease_token"] for r in claim(conn, 2)}
    with psycopg.connect(dsn, row_factory=dict_row) as first:
        assert complete(first, [(a, jobs[a])]) == {a: True}  # not committed yet
        done = threading.Event()

        def second() -> None:
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as other:
                complete(other, [(b, jobs[b])])
            done.set()

        t = threading.Thread(target=second)
        t.start()
        assert not done.wait(0.5)  # queued behind the first completion
        assert state(conn, c) == "waiting"
        first.commit()
        assert done.wait(30)
        t.join(30)
    assert state(conn, c) == "available"


def test_an_enqueue_racing_the_completion_of_its_dependency_is_released(conn: Conn, dsn: str) -> None:
    """The enqueue holds the dependency's row: its completion waits and then sees the new dependency."""
    a = enqueue(conn, "a")
    got = claim_one(conn)
    with psycopg.connect(dsn, row_factory=dict_row) as other:
        b = enqueue(other, "b", depends_on=[a])  # not committed yet
        done = threading.Event()

        def finish() -> None:
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as third:
                complete(third, [pair(got)])
            done.set()

        t = threading.Thread(target=finish)
        t.start()
        assert not done.wait(0.5)  # blocked on the enqueue's hold on a
        other.commit()
        assert done.wait(30)
        t.join(30)
    assert state(conn, b) == "available"


def test_a_job_that_waits_stops_the_cancellation_and_keeps_its_own_dependents(conn: Conn) -> None:
    a, w, k, other = enqueue_many(
        conn, ["a", "w", "k", "o"], depends_on=[[], [-1], [-2], [-1]], on_dependency_failure=[None, "wait", None, None]
    )
    assert cancel(conn, a) == "cancelled"
    assert [state(conn, i) for i in (w, k, other)] == ["waiting", "waiting", "cancelled"]
    assert edges(conn) == [(a, w), (w, k)]
    assert cancel(conn, w) == "cancelled"  # giving up on the one that waits takes its dependents along
    assert [h["error"] for h in history(conn, k)] == [f"dependency {w} cancelled"]
    assert edges(conn) == []


def test_a_redrive_waits_for_an_enqueue_that_depends_on_the_dead_job(conn: Conn, dsn: str) -> None:
    """Else the redriven job could complete before the new dependency row is visible, stranding it."""
    a = enqueue(conn, "a", max_attempts=1)
    assert fail(conn, *pair(claim_one(conn))) == "dead"
    with psycopg.connect(dsn, row_factory=dict_row) as other:
        w = enqueue(other, "w", depends_on=[a], on_dependency_failure="wait")  # not committed yet
        done = threading.Event()

        def redrive() -> None:
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as third:
                assert retry(third, a) == "retried"
            done.set()

        t = threading.Thread(target=redrive)
        t.start()
        assert not done.wait(0.5)  # waits for the enqueue
        other.commit()
        assert done.wait(30)
        t.join(30)
    run(conn, a)
    assert state(conn, w) == "available"
