# The lambdas handed to together() run before the loop moves on, so binding loop variables late is fine.
# ruff: noqa: B023
"""Scenario 7's races, driven straight through the SQL functions from several connections with random timing.

Each race function takes a DSN (the server, or a PgBouncer in front of it)
and a number of iterations, asserts its invariants on every iteration and
returns counts of the interleavings it saw.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

QUEUE = "race"


def connect(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.prepare_threshold = None  # also fine behind a transaction-pooling PgBouncer
    return conn


def jitter(max_ms: float = 2.0) -> None:
    time.sleep(random.uniform(0, max_ms) / 1000)


def together(*fns: Callable[[], Any]) -> list[Any]:
    """Run fns at the same moment, each in its own thread; returns their results (exceptions re-raised)."""
    barrier = threading.Barrier(len(fns))
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def run(i: int, fn: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            results[i] = fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def enqueue(conn: psycopg.Connection[Any], key: str | None = None, max_attempts: int = 10) -> int:
    row = conn.execute(
        "SELECT pgsched.enqueue('chaos.race', '{}', %s, NULL, 0, %s, %s)", [QUEUE, key, max_attempts]
    ).fetchone()
    assert row is not None
    return int(row[0])


def claim(
    conn: psycopg.Connection[Any], worker: str, lease: float = 30.0, *, runs_out_in: float | None = None
) -> list[tuple[int, int, int]]:
    """Claims one job; with runs_out_in, a 1 s lease (the shortest claim() grants) taken as if claimed
    1 - runs_out_in seconds ago (the owner's p_now), so it runs out that soon on the real clock."""
    if runs_out_in is None:
        query = "SELECT id, lease_token, attempt FROM pgsched.claim(%s, ARRAY[%s], 1, %s)"
        params: list[Any] = [worker, QUEUE, timedelta(seconds=lease)]
    else:
        query = (
            "SELECT id, lease_token, attempt FROM pgsched.claim(%s, ARRAY[%s], 1, interval '1 second',"
            " p_now => pg_catalog.clock_timestamp() - %s)"
        )
        params = [worker, QUEUE, timedelta(seconds=1 - runs_out_in)]
    return [(r[0], r[1], r[2]) for r in conn.execute(query, params).fetchall()]


def complete(conn: psycopg.Connection[Any], job_id: int, token: int) -> bool:
    row = conn.execute(
        "SELECT accepted FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [job_id, token]
    ).fetchone()
    return bool(row and row[0])


def terminal_rows(conn: psycopg.Connection[Any], job_id: int) -> list[str]:
    return [r[0] for r in conn.execute("SELECT state::text FROM pgsched.job_history WHERE id = %s", [job_id])]


def events(conn: psycopg.Connection[Any], job_id: int) -> Counter[str]:
    return Counter(r[0] for r in conn.execute("SELECT kind FROM pgsched.job_timeline WHERE job_id = %s", [job_id]))


def cancel_vs_claim(dsn: str, iterations: int) -> Counter[str]:
    """A cancel that returns 'cancelled' means the job never starts; a terminal state is never overwritten."""
    seen: Counter[str] = Counter()
    with connect(dsn) as a, connect(dsn) as b, connect(dsn) as c:
        for _ in range(iterations):
            job_id = enqueue(c)
            claimed, cancelled = together(
                lambda: (jitter(), claim(a, "racer"))[1],
                lambda: (jitter(), b.execute("SELECT pgsched.cancel(%s)", [job_id]).fetchone()[0])[1],  # type: ignore[index]
            )
            got = [j for j in claimed if j[0] == job_id]
            if cancelled == "cancelled":
                assert not got, f"job {job_id}: claimed although cancel() returned 'cancelled'"
                assert not claim(a, "late"), "a cancelled job was claimed afterwards"
                assert terminal_rows(c, job_id) == ["cancelled"]
                assert events(c, job_id)["claimed"] == 0
                seen["cancelled before start"] += 1
                continue
            assert cancelled == "cancel_requested", f"job {job_id}: cancel() returned {cancelled!r}"
            assert got, f"job {job_id}: neither cancelled nor claimed"
            _, token, _ = got[0]
            beat = a.execute(
                "SELECT held, cancel_requested FROM pgsched.heartbeat(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], '30s')",
                [job_id, token],
            ).fetchone()
            assert beat == (True, True), f"job {job_id}: the running handler must see the cancel request"
            # The handler either finishes anyway or stops; a late cancel never overwrites the outcome.
            if random.random() < 0.5:
                final, late = together(
                    lambda: complete(a, job_id, token) and "completed",
                    lambda: (jitter(0.5), b.execute("SELECT pgsched.cancel(%s)", [job_id]).fetchone()[0])[1],  # type: ignore[index]
                )
                assert final == "completed"
                assert late in ("cancel_requested", "already_completed"), late
            else:
                final = a.execute("SELECT pgsched.fail(%s, %s, 'stopped')", [job_id, token]).fetchone()[0]  # type: ignore[index]
                assert final == "cancelled"
            after = b.execute("SELECT pgsched.cancel(%s)", [job_id]).fetchone()[0]  # type: ignore[index]
            assert after == f"already_{final}", (job_id, final, after)
            assert terminal_rows(c, job_id) == [final], f"job {job_id}: terminal rows {terminal_rows(c, job_id)}"
            seen[f"claimed first, then {final}"] += 1
    return seen


def expiry_vs_completion(dsn: str, iterations: int) -> Counter[str]:
    """A completion racing the lease expiry: exactly one of them wins, and the loser changes nothing. A
    completion that comes after the lease ran out loses even when no expiry has run yet."""
    seen: Counter[str] = Counter()
    with connect(dsn) as a, connect(dsn) as b, connect(dsn) as c:
        for _ in range(iterations):
            enqueue(c)
            ((job_id, token, _),) = claim(a, "owner", runs_out_in=0.02)
            accepted, expired = together(
                lambda: (jitter(40), complete(a, job_id, token))[1],
                lambda: (jitter(40), b.execute("SELECT pgsched.expire_leases()").fetchone()[0])[1],  # type: ignore[index]
            )
            kinds = events(c, job_id)
            rows = terminal_rows(c, job_id)
            if accepted:
                assert rows == ["completed"], (job_id, rows)
                assert kinds["lease_expired"] == 0, (job_id, kinds)
                seen["completion won"] += 1
            else:
                # The lease ran out first. (Expired by this race's rescuer, by a worker's housekeeping when workers
                # share the database, or, when the rescuer came before the lease ran out, by this late one.)
                deadline = time.monotonic() + 10
                while kinds["lease_expired"] == 0 and time.monotonic() < deadline:
                    b.execute("SELECT pgsched.expire_leases()")
                    kinds = events(c, job_id)
                assert kinds["lease_expired"] == 1, (job_id, expired, kinds)
                assert rows == [], (job_id, rows)
                state = c.execute("SELECT state::text FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
                assert state == ("available",)
                c.execute("SELECT pgsched.cancel(%s)", [job_id])  # tidy up, so the next claim takes the next job
                seen["expiry won"] += 1
    return seen


def reclaim_vs_stale_rescue(dsn: str, iterations: int) -> Counter[str]:
    """Two rescuers race a re-claim and the old owner's late completion: the rescue happens once, never
    touches the new lease, and only the current token can finish the job (the late one never can)."""
    seen: Counter[str] = Counter()
    with connect(dsn) as a, connect(dsn) as b, connect(dsn) as r1, connect(dsn) as r2, connect(dsn) as c:
        for _ in range(iterations):
            enqueue(c)
            ((job_id, old_token, _),) = claim(a, "old-owner", runs_out_in=0.005)
            time.sleep(0.01)  # the lease has run out

            def reclaim() -> tuple[int, int, int] | None:
                deadline = time.monotonic() + 0.05
                while time.monotonic() < deadline:
                    got = claim(b, "new-owner")
                    if got:
                        return got[0]
                return None

            late, _, _, new = together(
                lambda: (jitter(3), complete(a, job_id, old_token))[1],
                lambda: (jitter(3), r1.execute("SELECT pgsched.expire_leases()"))[1],
                lambda: (jitter(3), r2.execute("SELECT pgsched.expire_leases()"))[1],
                reclaim,
            )
            kinds = events(c, job_id)
            # The lease had run out before the race: the old owner's completion is refused whoever comes first.
            assert not late, f"job {job_id}: a completion after the lease ran out was accepted"
            assert kinds["lease_expired"] == 1, f"job {job_id}: rescued {kinds['lease_expired']} times"
            if new is None:
                new = claim(b, "new-owner")[0]
                seen["rescued, re-claimed after the race"] += 1
            else:
                seen["rescued and re-claimed during the race"] += 1
            assert new[0] == job_id, (job_id, new)
            assert new[1] > old_token, f"job {job_id}: new token {new[1]} not above {old_token}"
            assert new[2] == 2, f"job {job_id}: attempt {new[2]} after one rescue"
            assert not complete(a, job_id, old_token), "a stale token finished the job"
            assert complete(b, job_id, new[1]), "the new owner's completion was refused"
            assert terminal_rows(c, job_id) == ["completed"]
    return seen


def concurrent_idempotent_enqueue(
    dsn: str, rounds: int, connections: int = 10, per_connection: int = 10
) -> Counter[str]:
    """100 concurrent enqueues of one key from 10 connections make exactly one job."""
    seen: Counter[str] = Counter()
    conns = [connect(dsn) for _ in range(connections)]
    try:
        for round_no in range(rounds):
            key = f"race-key-{round_no}-{random.randrange(1 << 30)}"

            def burst(conn: psycopg.Connection[Any], i: int) -> list[int | None]:
                ids: list[int | None] = []
                for k in range(per_connection):
                    jitter(1)
                    if (i + k) % 3 == 0:  # the documented plain INSERT: a repeat is INSERT 0 0, no error
                        conn.execute(
                            "INSERT INTO pgsched.jobs (task, args, queue, idempotency_key)"
                            " VALUES ('chaos.race', '{}', %s, %s)",
                            [QUEUE, key],
                        )
                        ids.append(None)
                    else:
                        ids.append(enqueue(conn, key))
                return ids

            results = together(*[lambda conn=conn, i=i: burst(conn, i) for i, conn in enumerate(conns)])
            returned = {x for ids in results for x in ids if x is not None}
            assert len(returned) == 1, f"key {key}: enqueue returned ids {returned}"
            n = (
                conns[0]
                .execute(
                    "SELECT (SELECT count(*) FROM pgsched.jobs WHERE idempotency_key = %s)"
                    " + (SELECT count(*) FROM pgsched.job_history WHERE idempotency_key = %s)",
                    [key, key],
                )
                .fetchone()
            )
            assert n == (1,), f"key {key}: {n} jobs"
            conns[0].execute("SELECT pgsched.cancel(%s)", [returned.pop()])
            seen["one job from 100 enqueues"] += 1
    finally:
        for conn in conns:
            conn.close()
    return seen
