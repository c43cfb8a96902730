"""Races between connections: claims, stale completions, idempotency keys, cancellation."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

import psycopg
from psycopg.rows import dict_row

from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    complete,
    enqueue,
    enqueue_many,
    expire_leases,
    fail,
    heartbeat,
    history,
    job,
    pair,
    scalar,
)

T = TypeVar("T")

JOBS = 20_000
CLAIMERS = 8


@contextmanager
def connections(dsn: str, n: int) -> Iterator[list[Conn]]:
    with ExitStack() as stack:
        yield [stack.enter_context(psycopg.connect(dsn, autocommit=True, row_factory=dict_row)) for _ in range(n)]


def in_parallel(fns: list[Callable[[], T]]) -> list[T]:
    """Run the functions on threads released together; re-raise the first failure."""
    barrier = threading.Barrier(len(fns))

    def start(fn: Callable[[], T]) -> T:
        barrier.wait(timeout=30)
        return fn()

    with ThreadPoolExecutor(len(fns)) as pool:
        futures = [pool.submit(start, fn) for fn in fns]
        return [f.result(timeout=120) for f in futures]


def accepts(c: Conn, lease: tuple[int, int]) -> bool:
    """Whether complete() accepted this one (id, token)."""
    return complete(c, [lease])[lease[0]]


def test_racing_claimers_never_claim_a_job_twice(dsn: str, conn: Conn) -> None:
    ids: list[int] = []
    for start in range(0, JOBS, 5000):
        ids += enqueue_many(conn, ["t"] * 5000, args=[{"n": n} for n in range(start, start + 5000)])
    assert len(set(ids)) == JOBS

    def claimer(c: Conn, number: int) -> Callable[[], list[tuple[int, int]]]:
        def run() -> list[tuple[int, int]]:
            got: list[tuple[int, int]] = []
            for rotation in range(number, 10**6):
                rows = claim(c, 50, worker=f"w{number}", lease=timedelta(hours=1), start_shard=rotation)
                got += [pair(r) for r in rows]
                if not rows and not scalar(c, "SELECT count(*) FROM pgsched.jobs WHERE state = 'available'"):
                    return got
            raise AssertionError("claims never ran dry")

        return run

    with connections(dsn, CLAIMERS) as conns:
        claimed = in_parallel([claimer(c, i) for i, c in enumerate(conns)])
        everything = [p for per_worker in claimed for p in per_worker]
        claimed_ids = [job_id for job_id, _ in everything]
        assert len(claimed_ids) == JOBS
        assert set(claimed_ids) == set(ids)  # every job exactly once
        assert len({token for _, token in everything}) == JOBS
        assert sum(1 for per_worker in claimed if per_worker) >= 2  # the claimers really raced
        assert scalar(conn, "SELECT count(*) FROM pgsched.jobs WHERE state = 'running' AND attempt = 1") == JOBS

        def completer(c: Conn, pairs: list[tuple[int, int]]) -> Callable[[], int]:
            def run() -> int:
                accepted = 0
                for i in range(0, len(pairs), 1000):
                    accepted += sum(complete(c, pairs[i : i + 1000]).values())
                return accepted

            return run

        done = in_parallel([completer(c, p) for c, p in zip(conns, claimed, strict=True)])
    assert sum(done) == JOBS
    assert scalar(conn, "SELECT count(*) FROM pgsched.jobs") == 0
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history WHERE state = 'completed'") == JOBS
    assert scalar(conn, "SELECT count(DISTINCT id) FROM pgsched.job_history") == JOBS


def test_stale_workers_racing_current_ones_change_nothing(dsn: str, conn: Conn, now: datetime) -> None:
    enqueue_many(conn, ["t"] * 400)
    old = claim(conn, 400, worker="stale", now=now)
    later = now + timedelta(minutes=1)
    assert expire_leases(conn, now=later) == 400
    new = claim(conn, 400, worker="current", now=later)
    assert {r["id"] for r in new} == {r["id"] for r in old}
    stale_pairs = [pair(r) for r in old]
    current_pairs = [pair(r) for r in new]
    random.shuffle(stale_pairs)
    random.shuffle(current_pairs)

    def stale(c: Conn, part: list[tuple[int, int]]) -> Callable[[], int]:
        def run() -> int:
            wins = 0
            for i in range(0, len(part), 20):
                chunk = part[i : i + 20]
                wins += sum(held for held, _ in heartbeat(c, chunk, lease=timedelta(days=1)).values())
                wins += sum(complete(c, chunk, results=[{"by": "stale"}] * len(chunk)).values())
                wins += sum(fail(c, *p, "stale", final=True) != "lease_lost" for p in chunk[:2])
            return wins

        return run

    def current(c: Conn, part: list[tuple[int, int]]) -> Callable[[], int]:
        def run() -> int:
            return sum(
                sum(complete(c, part[i : i + 20], results=[{"by": "current"}] * len(part[i : i + 20])).values())
                for i in range(0, len(part), 20)
            )

        return run

    with connections(dsn, 8) as conns:
        results = in_parallel(
            [stale(c, stale_pairs[i::4]) for i, c in enumerate(conns[:4])]
            + [current(c, current_pairs[i::4]) for i, c in enumerate(conns[4:])]
        )
    assert results[:4] == [0, 0, 0, 0]
    assert sum(results[4:]) == 400
    rows = conn.execute("SELECT state, leased_by, result FROM pgsched.job_history").fetchall()
    assert len(rows) == 400
    assert {(r["state"], r["leased_by"], r["result"]["by"]) for r in rows} == {("completed", "current", "current")}


def test_concurrent_enqueues_of_one_key_make_one_job(dsn: str, conn: Conn) -> None:
    def producer(c: Conn) -> Callable[[], list[int]]:
        return lambda: [enqueue(c, "t", {"order": 7}, idempotency_key="payment-7") for _ in range(10)]

    with connections(dsn, 10) as conns:
        got = in_parallel([producer(c) for c in conns])
    returned = {job_id for per_conn in got for job_id in per_conn}
    assert sum(len(per_conn) for per_conn in got) == 100
    assert scalar(conn, "SELECT count(*) FROM pgsched.jobs") == 1
    assert returned == {scalar(conn, "SELECT id FROM pgsched.jobs")}


def test_concurrent_enqueues_of_one_key_with_other_args_get_a_conflict_not_another_job(dsn: str, conn: Conn) -> None:
    def producer(c: Conn, n: int) -> Callable[[], int | str | None]:
        def run() -> int | str | None:
            try:
                return enqueue(c, "t", {"n": n}, idempotency_key="payment-8")
            except psycopg.Error as exc:
                return exc.sqlstate

        return run

    with connections(dsn, 8) as conns:
        got = in_parallel([producer(c, n) for n, c in enumerate(conns)])
    ids = [g for g in got if isinstance(g, int)]
    assert len(ids) == 1, got
    assert sorted(str(g) for g in got if not isinstance(g, int)) == ["PS422"] * 7
    assert scalar(conn, "SELECT id FROM pgsched.jobs") == ids[0]


def test_concurrent_batches_sharing_keys_agree_on_the_jobs(dsn: str, conn: Conn) -> None:
    keys = [f"k{i}" for i in range(50)]

    def producer(c: Conn) -> Callable[[], dict[str, int]]:
        def run() -> dict[str, int]:
            mine = random.sample(keys, 30)
            return dict(zip(mine, enqueue_many(c, ["t"] * 30, idempotency_keys=mine), strict=True))

        return run

    with connections(dsn, 10) as conns:
        got = in_parallel([producer(c) for c in conns])
    rows = conn.execute("SELECT idempotency_key, id FROM pgsched.jobs").fetchall()
    holders = {r["idempotency_key"]: r["id"] for r in rows}
    assert len(rows) == len(holders)  # one job per key
    for per_conn in got:
        for key, job_id in per_conn.items():
            assert holders[key] == job_id


def test_cancel_racing_claim_never_runs_a_cancelled_job(dsn: str, conn: Conn) -> None:
    outcomes: dict[str, int] = {}
    with connections(dsn, 2) as (canceller, claimer):
        for _ in range(300):
            job_id = enqueue(conn)
            said, claimed = in_parallel([partial(cancel, canceller, job_id), partial(claim, claimer, 1)])
            outcomes[said] = outcomes.get(said, 0) + 1
            got = [r for r in claimed if r["id"] == job_id]
            if said == "cancelled":
                assert got == []
                assert job(conn, job_id) is None
                assert [h["state"] for h in history(conn, job_id)] == ["cancelled"]
            else:
                assert said == "cancel_requested"
                assert len(got) == 1
                row = job(conn, job_id)
                assert row is not None
                assert row["cancel_requested_at"] is not None
                assert heartbeat(conn, [pair(got[0])]) == {job_id: (True, True)}
                assert scalar(conn, "SELECT pgsched.fail(%s, %s, 'stopped')", pair(got[0])) == "cancelled"
            assert claim(conn, 10) == []
            # a terminal state is never overwritten
            token = scalar(conn, "SELECT pg_catalog.nextval('pgsched.lease_token_seq')")
            assert complete(conn, [(job_id, token)]) == {job_id: False}
            assert cancel(conn, job_id) == "already_cancelled"
            assert len(history(conn, job_id)) == 1
    assert set(outcomes) <= {"cancelled", "cancel_requested"}
    assert outcomes.get("cancelled", 0) > 0


def test_cancel_racing_completion_keeps_one_outcome(dsn: str, conn: Conn) -> None:
    with connections(dsn, 2) as (canceller, worker):
        for _ in range(200):
            job_id = enqueue(conn)
            [got] = claim(conn, 1)
            said, accepted = in_parallel([partial(cancel, canceller, job_id), partial(accepts, worker, pair(got))])
            assert accepted  # a cancel request never takes a success away
            assert said in ("cancel_requested", "already_completed")
            assert [h["state"] for h in history(conn, job_id)] == ["completed"]
            assert job(conn, job_id) is None
            assert cancel(conn, job_id) == "already_completed"


def test_expiry_racing_completion_keeps_one_outcome(dsn: str, conn: Conn, now: datetime) -> None:
    with connections(dsn, 2) as (expirer, worker):
        for _ in range(200):
            job_id = enqueue(conn)
            [got] = claim(conn, 1, now=now)
            expired, accepted = in_parallel(
                [partial(expire_leases, expirer, now=now + timedelta(minutes=1)), partial(accepts, worker, pair(got))]
            )
            assert expired + accepted == 1  # exactly one of them won
            row = job(conn, job_id)
            if accepted:
                assert row is None
                assert [h["state"] for h in history(conn, job_id)] == ["completed"]
            else:
                assert row is not None
                assert row["state"] == "available"
                assert history(conn, job_id) == []
                assert cancel(conn, job_id) == "cancelled"  # clear the way for the next round
