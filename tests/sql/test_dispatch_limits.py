"""Dispatch limits in the claim: global and per-key concurrency, rate limits, tenant fairness."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.sql.helpers import (
    Conn,
    claim,
    complete,
    enqueue,
    enqueue_many,
    fail,
    heartbeat,
    pair,
    scalar,
    snooze,
)
from tests.sql.test_dispatch_aging import configure

T = TypeVar("T")
CLAIMERS = 8


@contextmanager
def connections(dsn: str, n: int) -> Iterator[list[Conn]]:
    with ExitStack() as stack:
        yield [stack.enter_context(psycopg.connect(dsn, autocommit=True, row_factory=dict_row)) for _ in range(n)]


def together(fns: list[Callable[[], T]]) -> list[T]:
    """Run the functions on threads released by one barrier; re-raise the first failure."""
    barrier = threading.Barrier(len(fns))
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[i] = fns[i]()
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def running(conn: Conn, queue: str = "default") -> int:
    return int(scalar(conn, "SELECT count(*) FROM pgsched.jobs WHERE state = 'running' AND queue = %s", [queue]))


def test_concurrent_claimers_never_exceed_the_concurrency_limit(conn: Conn, dsn: str) -> None:
    configure(conn, concurrency=5)
    enqueue_many(conn, ["t"] * 300)
    with connections(dsn, CLAIMERS) as conns:
        for round_ in range(6):
            got = together([lambda c=c, i=i: claim(c, 3, worker=f"w{i}", start_shard=i) for i, c in enumerate(conns)])
            claimed = [job for rows in got for job in rows]
            assert len(claimed) == 5, (round_, len(claimed))
            assert running(conn) == 5
            # Two finish: exactly two slots open for the next round.
            complete(conn, [pair(j) for j in claimed[:2]])
            got = together([lambda c=c, i=i: claim(c, 3, worker=f"w{i}", start_shard=i) for i, c in enumerate(conns)])
            assert sum(len(rows) for rows in got) == 2
            assert running(conn) == 5
            complete(conn, [pair(j) for rows in got for j in rows] + [pair(j) for j in claimed[2:]])


def test_an_expired_lease_frees_its_slot_without_any_repair(conn: Conn, now: datetime) -> None:
    configure(conn, concurrency=2)
    enqueue_many(conn, ["t"] * 5)
    first = claim(conn, 5, lease=timedelta(seconds=10), now=now)
    assert len(first) == 2
    assert claim(conn, 5, now=now + timedelta(seconds=9)) == []
    # The worker was SIGKILLed: nothing expired the lease yet, the slot is free anyway.
    later = claim(conn, 5, now=now + timedelta(seconds=11))
    assert len(later) == 2
    assert running(conn) == 4  # two of them stale, still 'running' until expire_leases
    assert claim(conn, 5, now=now + timedelta(seconds=12)) == []


def test_a_lease_that_ran_out_is_lost_to_its_worker_before_any_expiry(conn: Conn, now: datetime) -> None:
    configure(conn, concurrency=2)
    enqueue_many(conn, ["t"] * 5)
    first = claim(conn, 5, lease=timedelta(seconds=1), now=now)
    assert len(first) == 2
    later = now + timedelta(seconds=2)  # no expire_leases has run: the rows still say 'running'
    second = claim(conn, 5, worker="w2", now=later)
    assert len(second) == 2
    # The first worker comes back late: every fenced call of it is refused, so only two hold a lease.
    assert heartbeat(conn, [pair(j) for j in first], now=later) == {j["id"]: (False, False) for j in first}
    assert complete(conn, [pair(first[0])], now=later) == {first[0]["id"]: False}
    assert fail(conn, *pair(first[1]), now=later) == "lease_lost"
    assert snooze(conn, *pair(first[1]), later, now=later) == "lease_lost"
    live = scalar(conn, "SELECT count(*) FROM pgsched.jobs WHERE state = 'running' AND lease_expires_at > %s", [later])
    assert live == 2
    assert heartbeat(conn, [pair(j) for j in second], now=later) == {j["id"]: (True, False) for j in second}
    assert complete(conn, [pair(j) for j in second], now=later) == {j["id"]: True for j in second}


def test_a_limited_queue_keeps_priority_strict_across_shards(conn: Conn) -> None:
    configure(conn, concurrency=1000)
    high = enqueue_many(conn, ["t"] * 60, priorities=[10] * 60)
    low = enqueue(conn, priority=0)
    order: list[int] = []
    for _ in range(20):
        got = claim(conn, 4)  # limited claims rotate their first shard by themselves
        if not got:
            break
        order += [r["id"] for r in got]
    assert sorted(order) == sorted([*high, low])
    assert order[-1] == low


def test_per_key_concurrency(conn: Conn, dsn: str) -> None:
    configure(conn, key_concurrency=2)
    for key in ("customer:1", "customer:2"):
        for _ in range(10):
            enqueue(conn, concurrency_key=key)
    for _ in range(3):
        enqueue(conn)  # no key: not limited
    with connections(dsn, CLAIMERS) as conns:
        got = together([lambda c=c, i=i: claim(c, 4, worker=f"w{i}", start_shard=i) for i, c in enumerate(conns)])
    keys = [scalar(conn, "SELECT concurrency_key FROM pgsched.jobs WHERE id = %s", [j["id"]]) for r in got for j in r]
    assert sorted(keys, key=str) == sorted(["customer:1"] * 2 + ["customer:2"] * 2 + [None] * 3, key=str)


def test_concurrent_claimers_never_exceed_the_rate(conn: Conn, dsn: str, now: datetime) -> None:
    configure(conn, rate=5, rate_period=timedelta(seconds=10))
    enqueue_many(conn, ["t"] * 100)
    with connections(dsn, CLAIMERS) as conns:
        got = together([lambda c=c, i=i: claim(c, 3, worker=f"w{i}", now=now) for i, c in enumerate(conns)])
    assert sum(len(r) for r in got) == 5
    # Finishing frees no start: the window counts starts, not running jobs.
    complete(conn, [pair(j) for r in got for j in r])
    assert claim(conn, 3, now=now + timedelta(seconds=9)) == []
    assert scalar(conn, "SELECT pgsched.next_start(%s, %s)", [["default"], now]) == now + timedelta(seconds=10)
    assert len(claim(conn, 10, now=now + timedelta(seconds=10, milliseconds=1))) == 5


def test_the_rate_window_slides(conn: Conn, now: datetime) -> None:
    configure(conn, rate=5, rate_period=timedelta(seconds=10))
    enqueue_many(conn, ["t"] * 100)
    assert len(claim(conn, 3, now=now)) == 3
    assert len(claim(conn, 5, now=now + timedelta(seconds=6))) == 2
    # At t+11 the three starts of t left the window; the two of t+6 are still in it.
    assert len(claim(conn, 5, now=now + timedelta(seconds=11))) == 3
    assert claim(conn, 5, now=now + timedelta(seconds=15)) == []
    assert len(claim(conn, 5, now=now + timedelta(seconds=16, milliseconds=1))) == 2


def test_next_start_is_null_while_a_start_is_allowed(conn: Conn, now: datetime) -> None:
    assert scalar(conn, "SELECT pgsched.next_start(%s, %s)", [["default"], now]) is None
    configure(conn, rate=1, rate_period=timedelta(seconds=10))
    assert scalar(conn, "SELECT pgsched.next_start(%s, %s)", [["default"], now]) is None
    enqueue(conn)
    assert len(claim(conn, 1, now=now)) == 1
    assert scalar(conn, "SELECT pgsched.next_start(%s, %s)", [["default"], now]) == now + timedelta(seconds=10)
    # Another queue without a limit: a claim may still start something.
    assert scalar(conn, "SELECT pgsched.next_start(%s, %s)", [["default", "other"], now]) is None


def test_per_key_rate(conn: Conn, now: datetime) -> None:
    configure(conn, key_rate=2, rate_period=timedelta(seconds=10))
    for key in ("a", "b"):
        for _ in range(5):
            enqueue(conn, concurrency_key=key)
    assert len(claim(conn, 10, now=now)) == 4
    assert claim(conn, 10, now=now + timedelta(seconds=5)) == []
    assert len(claim(conn, 10, now=now + timedelta(seconds=10, milliseconds=1))) == 4


def first_position(conn: Conn, tenant: str, batch: int) -> int:
    """How many jobs were claimed (in batches) before the first of `tenant`'s."""
    seen = 0
    while True:
        rows = claim(conn, batch, start_shard=None)
        assert rows, "ran dry"
        if any(r["tenant"] == tenant for r in rows):
            return seen
        seen += len(rows)


def test_a_burst_delays_another_tenant_by_one_batch_under_fairness(conn: Conn) -> None:
    enqueue_many(conn, ["t"] * 200, tenants=["A"] * 200)
    enqueue(conn, tenant="B")
    assert first_position(conn, "B", 10) == 200  # strict FIFO: behind the whole burst
    conn.execute("DELETE FROM pgsched.jobs")
    configure(conn, tenant_fairness=True)
    enqueue_many(conn, ["t"] * 200, tenants=["A"] * 200)
    enqueue(conn, tenant="B")
    assert first_position(conn, "B", 10) == 0  # in the first batch


def test_fairness_shares_each_claim_between_active_tenants(conn: Conn) -> None:
    configure(conn, tenant_fairness=True)
    for tenant, n in (("A", 100), ("B", 100), ("C", 3)):
        enqueue_many(conn, ["t"] * n, tenants=[tenant] * n)
    first = claim(conn, 9, start_shard=None)
    assert sorted(r["tenant"] for r in first) == ["A"] * 3 + ["B"] * 3 + ["C"] * 3
    second = claim(conn, 10, start_shard=None)
    assert sorted(r["tenant"] for r in second) == ["A"] * 5 + ["B"] * 5


def test_among_many_tenants_each_waits_about_tenants_over_batch_claims(conn: Conn) -> None:
    configure(conn, tenant_fairness=True)
    for t in range(20):
        enqueue_many(conn, ["t"] * 20, tenants=[f"t{t:02d}"] * 20)
    # 20 tenants, batches of 5: round robin serves every tenant in 4 claims.
    served: set[str] = set()
    claims = 0
    while len(served) < 20:
        served |= {r["tenant"] for r in claim(conn, 5, start_shard=None)}
        claims += 1
    assert claims == 4, claims


@pytest.mark.parametrize("bad", ["", "k" * 201])
@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_a_concurrency_key_out_of_bounds_is_named_on_every_path(conn: Conn, bad: str) -> None:
    statements = [
        ("SELECT pgsched.enqueue('t', concurrency_key => %s)", [bad], "pgsched: concurrency_key"),
        ("INSERT INTO pgsched.jobs (task, concurrency_key) VALUES ('t', %s)", [bad], "pgsched: concurrency_key"),
        (
            "SELECT pgsched.enqueue_many(ARRAY['t', 't'], concurrency_keys => ARRAY[NULL, %s])",
            [bad],
            "pgsched: row 2 of the batch: concurrency_key",
        ),
    ]
    for statement, params, message in statements:
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            conn.execute(statement, params)
        conn.rollback()
        assert str(refused.value).startswith(message), refused.value
        assert (refused.value.diag.constraint_name, refused.value.diag.column_name) == (
            "jobs_concurrency_key_length",
            "concurrency_key",
        )
    assert scalar(conn, "SELECT count(*) FROM pgsched.jobs") == 0
