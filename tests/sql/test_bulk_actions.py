"""pgsched.cancel_many() and pgsched.retry_many(): cancel()/retry() for many jobs in one statement, same rules."""

from __future__ import annotations

import threading
from datetime import datetime

import psycopg
from psycopg.rows import dict_row

from tests.sql.helpers import (
    Conn,
    claim_one,
    complete,
    enqueue,
    fail,
    heartbeat,
    pair,
    refused,
    snapshot,
    state,
)
from tests.sql.test_roles import DENIED, MakeRole, connect, make_role  # noqa: F401 (make_role is a fixture)


def cancel_many(conn: Conn, ids: list[int | None], *, now: datetime | None = None) -> list[tuple[int, str]]:
    rows = conn.execute("SELECT * FROM pgsched.cancel_many(%s::bigint[], %s)", [ids, now]).fetchall()
    return [(r["job_id"], r["result"]) for r in rows]


def retry_many(conn: Conn, ids: list[int | None], *, now: datetime | None = None) -> list[tuple[int, str]]:
    rows = conn.execute("SELECT * FROM pgsched.retry_many(%s::bigint[], %s)", [ids, now]).fetchall()
    return [(r["job_id"], r["result"]) for r in rows]


def dead_job(conn: Conn, queue: str = "default", **kw: object) -> int:
    job_id = enqueue(conn, queue=queue, max_attempts=1, **kw)
    assert fail(conn, *pair(claim_one(conn, queues=[queue]))) == "dead"
    return job_id


def test_cancel_many_answers_per_job_in_id_order_each_id_once(conn: Conn) -> None:
    waiting = enqueue(conn)
    running = enqueue(conn, queue="busy")
    leased = claim_one(conn, queues=["busy"])
    done = enqueue(conn, queue="done")
    complete(conn, [pair(claim_one(conn, queues=["done"]))])
    dead = dead_job(conn, "dead")
    results = cancel_many(conn, [dead, waiting, None, running, done, waiting, 987654321])
    assert results == sorted(
        [
            (waiting, "cancelled"),
            (running, "cancel_requested"),
            (done, "already_completed"),
            (dead, "already_dead"),
            (987654321, "not_found"),
        ]
    )
    assert state(conn, waiting) == "cancelled"
    assert heartbeat(conn, [pair(leased)]) == {running: (True, True)}  # the worker sees the request
    assert cancel_many(conn, []) == []


def test_retry_many_redrives_dead_and_cancelled_jobs_only(conn: Conn) -> None:
    dead = [dead_job(conn) for _ in range(3)]
    cancelled = enqueue(conn)
    cancel_many(conn, [cancelled])
    active = enqueue(conn)
    done = enqueue(conn, queue="done")
    complete(conn, [pair(claim_one(conn, queues=["done"]))])
    results = dict(retry_many(conn, [*dead, cancelled, active, done]))
    assert results == {**dict.fromkeys(dead, "retried"), cancelled: "retried", active: "active", done: "not_retryable"}
    assert {state(conn, i) for i in [*dead, cancelled]} == {"available"}
    assert dict(retry_many(conn, dead)) == dict.fromkeys(dead, "active")  # a second redrive is a no-op


def test_too_many_ids_are_refused_and_nothing_changes(conn: Conn) -> None:
    job_id = enqueue(conn)
    before = snapshot(conn)
    with refused("54000") as info:
        cancel_many(conn, [job_id] * 10001)
    assert "at most 10000" in str(info.value)
    assert snapshot(conn) == before


def test_two_bulk_cancels_of_overlapping_sets_do_not_deadlock(dsn: str, conn: Conn) -> None:
    ids = [enqueue(conn, queue="busy") for _ in range(40)]
    for _ in ids:
        claim_one(conn, queues=["busy"])
    results: list[list[tuple[int, str]]] = []
    errors: list[BaseException] = []

    def run(order: list[int]) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
                results.append(cancel_many(c, order))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(ids,)), threading.Thread(target=run, args=(ids[::-1],))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert [dict(r) for r in results] == [dict.fromkeys(ids, "cancel_requested")] * 2


def test_only_admins_run_bulk_actions(conn: Conn, make_role: MakeRole) -> None:  # noqa: F811
    job_id = enqueue(conn)
    for granted in ("pgsched_worker", "pgsched_enqueue"):
        with connect(make_role(granted)) as c:
            with refused(DENIED):
                cancel_many(c, [job_id])
            with refused(DENIED):
                retry_many(c, [job_id])
    with connect(make_role("pgsched_admin")) as admin:
        assert cancel_many(admin, [job_id]) == [(job_id, "cancelled")]
        assert retry_many(admin, [job_id]) == [(job_id, "retried")]


def test_a_tenant_scoped_admin_touches_only_its_tenant(conn: Conn, make_role: MakeRole) -> None:  # noqa: F811
    mine, theirs, nobody = enqueue(conn, tenant="A"), enqueue(conn, tenant="B"), enqueue(conn)
    dead_mine, dead_theirs = dead_job(conn, "d", tenant="A"), dead_job(conn, "d", tenant="B")
    with connect(make_role("pgsched_admin", "pgsched_tenant_scoped", tenant="A")) as scoped:
        assert dict(cancel_many(scoped, [mine, theirs, nobody])) == {
            mine: "cancelled",
            theirs: "not_found",
            nobody: "not_found",
        }
        assert dict(retry_many(scoped, [dead_mine, dead_theirs])) == {dead_mine: "retried", dead_theirs: "not_found"}
    with connect(make_role("pgsched_admin", "pgsched_tenant_scoped")) as unbound:
        assert dict(cancel_many(unbound, [dead_mine])) == {dead_mine: "not_found"}  # scoped, not bound: nothing
    assert (state(conn, theirs), state(conn, nobody), state(conn, dead_theirs)) == ("available", "available", "dead")
    assert state(conn, dead_mine) == "available"
