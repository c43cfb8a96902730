"""DESIGN §5: pgsched_enqueue, pgsched_worker, pgsched_admin and pgsched_tenant_scoped, as login roles see them."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from pgsched import App
from pgsched.runtime.worker import Worker, WorkerOptions
from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    complete,
    enqueue,
    enqueue_many,
    fail,
    heartbeat,
    history,
    job,
    pair,
    refused,
    retry,
    scalar,
    snapshot,
)

DENIED = "42501"  # insufficient_privilege

MakeRole = Callable[..., str]


def _role_dsn(dsn: str, role: str, password: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.update(user=role, password=password)
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})


@pytest.fixture
def make_role(dsn: str, admin_dsn: str) -> Iterator[MakeRole]:
    """make_role('pgsched_worker', …) creates a LOGIN role granted exactly those roles; returns its DSN.

    Roles are cluster-wide, so each gets a unique name and is dropped after the test.
    """
    created: list[str] = []

    def make(*granted: str, tenant: str | None = None) -> str:
        name = f"pgsched_test_{secrets.token_hex(6)}"
        password = secrets.token_hex(12)
        with psycopg.connect(dsn, autocommit=True) as owner:
            owner.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), sql.Literal(password))
            )
            created.append(name)
            for role in granted:
                owner.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(name)))
            if tenant is not None:
                owner.execute("SELECT pgsched.bind_tenant(%s::regrole, %s)", [name, tenant])
        return _role_dsn(dsn, name, password)

    yield make
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        for name in created:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [name])
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def connect(role_dsn: str) -> Conn:
    return psycopg.connect(role_dsn, autocommit=True, row_factory=dict_row)


# -- pgsched_worker -------------------------------------------------------


def test_a_worker_role_runs_jobs_through_functions(conn: Conn, make_role: MakeRole) -> None:
    first = enqueue(conn, max_attempts=1)
    second = enqueue(conn, max_attempts=1)
    with connect(make_role("pgsched_worker")) as worker:
        got = claim_one(worker)
        assert heartbeat(worker, [pair(got)]) == {got["id"]: (True, False)}
        assert complete(worker, [pair(got)]) == {got["id"]: True}
        other = claim_one(worker)
        assert fail(worker, *pair(other), "nope") == "dead"
        assert scalar(worker, "SELECT count(*) FROM pgsched.jobs") == 0  # it may read
        worker.execute("SELECT pgsched.promote_due(), pgsched.expire_leases(), pgsched.maintain()")
    assert {h["state"] for i in (first, second) for h in history(conn, i)} == {"completed", "dead"}


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param("UPDATE pgsched.jobs SET state = 'available'", id="update-jobs"),
        pytest.param("DELETE FROM pgsched.jobs", id="delete-jobs"),
        pytest.param(
            "INSERT INTO pgsched.job_history (id, shard, state, queue, task, args, priority, run_at, attempt, "
            "max_attempts, labels, created_at, finished_at) VALUES (1, 0, 'completed', 'default', 't', '{}', 0, "
            "now(), 1, 1, '{}', now(), now())",
            id="insert-history",
        ),
        pytest.param("DELETE FROM pgsched.job_history", id="delete-history"),
        pytest.param("INSERT INTO pgsched.jobs (task, args) VALUES ('t', '{}')", id="insert-jobs"),
        pytest.param("SELECT pgsched.enqueue('t')", id="enqueue"),
        pytest.param("SELECT pgsched.cancel(1)", id="cancel"),
        pytest.param("SELECT pgsched.retry(1)", id="retry"),
        pytest.param("UPDATE pgsched.config SET audit = false", id="update-config"),
        pytest.param("SELECT pgsched._finish(NULL::pgsched.jobs, 'completed', now())", id="private-helper"),
    ],
)
def test_a_worker_role_writes_nothing_directly(conn: Conn, make_role: MakeRole, statement: str) -> None:
    job_id = enqueue(conn)
    claim_one(conn)
    before = snapshot(conn)
    with connect(make_role("pgsched_worker")) as worker, refused(DENIED):
        worker.execute(statement)
    assert snapshot(conn) == before
    assert job(conn, job_id) is not None


# -- pgsched_enqueue ------------------------------------------------------


def test_an_enqueue_role_inserts_and_enqueues_but_cannot_claim(conn: Conn, make_role: MakeRole) -> None:
    with connect(make_role("pgsched_enqueue")) as app:
        app.execute("""INSERT INTO pgsched.jobs (task, args) VALUES ('send', '{"to": 1}')""")
        by_function = enqueue(app, "send", {"to": 2}, queue="mail", idempotency_key="k")
        assert enqueue(app, "send", {"to": 2}, queue="other", idempotency_key="k") == by_function
        batch = enqueue_many(app, ["a", "b"])
        assert scalar(app, "SELECT count(*) FROM pgsched.jobs") == 4  # it may read
        assert scalar(app, "SELECT count(*) FROM pgsched.dead_letters") == 0
        before = snapshot(conn)
        for statement in (
            "SELECT * FROM pgsched.claim('w', ARRAY['default'], 10, '30 s')",
            "SELECT * FROM pgsched.complete(ARRAY[1::bigint], ARRAY[1::bigint])",
            "SELECT pgsched.cancel(1)",
            "UPDATE pgsched.jobs SET priority = 100",
            "DELETE FROM pgsched.jobs",
            "SELECT count(*) FROM pgsched.job_events",
            "SELECT count(*) FROM pgsched.job_timeline",
        ):
            with refused(DENIED):
                app.execute(statement)
        assert snapshot(conn) == before
    assert all(job(conn, i) is not None for i in [by_function, *batch])


def test_an_enqueue_role_reads_queue_stats(conn: Conn, make_role: MakeRole) -> None:
    enqueue(conn, queue="mail")
    with connect(make_role("pgsched_enqueue")) as app:
        rows = app.execute("SELECT queue, available FROM pgsched.queue_stats").fetchall()
    assert rows == [{"queue": "mail", "available": 1}]


# -- pgsched_admin --------------------------------------------------------


def test_an_admin_role_cancels_retries_and_pauses(conn: Conn, make_role: MakeRole) -> None:
    waiting = enqueue(conn)
    running = enqueue(conn, queue="busy")
    claim_one(conn, queues=["busy"])
    dead = enqueue(conn, queue="bad", max_attempts=1)
    fail(conn, *pair(claim_one(conn, queues=["bad"])))
    with connect(make_role("pgsched_admin")) as admin:
        assert cancel(admin, waiting) == "cancelled"
        assert cancel(admin, running) == "cancel_requested"
        assert retry(admin, dead) == "retried"
        assert retry(admin, waiting) == "retried"
        admin.execute("SELECT pgsched.pause_queue('busy')")
        admin.execute("UPDATE pgsched.config SET max_payload_bytes = 2048")
        enqueue(admin, "t")  # an admin is also an enqueuer and a worker
        assert claim_one(admin, queues=["bad"])["id"] == dead
        with refused(DENIED):
            admin.execute("UPDATE pgsched.jobs SET priority = 1")
    assert scalar(conn, "SELECT paused FROM pgsched.queues WHERE name = 'busy'") is True
    assert scalar(conn, "SELECT max_payload_bytes FROM pgsched.config") == 2048


# -- pgsched_tenant_scoped ------------------------------------------------


@pytest.fixture
def tenant_jobs(conn: Conn) -> dict[str | None, list[int]]:
    """Active and finished jobs of tenants A and B and of no tenant, written by the owner."""
    made: dict[str | None, list[int]] = {}
    for tenant in ("A", "B", None):
        finished = enqueue(conn, queue=f"q{tenant}", tenant=tenant, max_attempts=1)
        fail(conn, *pair(claim_one(conn, queues=[f"q{tenant}"])))
        made[tenant] = [enqueue(conn, queue=f"q{tenant}", tenant=tenant), finished]
    return made


def visible(c: Conn) -> dict[str, set[Any]]:
    return {
        "jobs": {r["id"] for r in c.execute("SELECT id FROM pgsched.jobs").fetchall()},
        "history": {r["id"] for r in c.execute("SELECT id FROM pgsched.job_history").fetchall()},
        "events": {r["job_id"] for r in c.execute("SELECT job_id FROM pgsched.job_events").fetchall()},
        "dead_letters": {r["id"] for r in c.execute("SELECT id FROM pgsched.dead_letters").fetchall()},
        "queues": {r["queue"] for r in c.execute("SELECT queue FROM pgsched.queue_stats").fetchall()},
    }


NOTHING: dict[str, set[Any]] = {
    "jobs": set(),
    "history": set(),
    "events": set(),
    "dead_letters": set(),
    "queues": set(),
}


def test_a_tenant_bound_role_sees_only_its_tenant(
    make_role: MakeRole, tenant_jobs: dict[str | None, list[int]]
) -> None:
    active, finished = tenant_jobs["A"]
    with connect(make_role("pgsched_worker", tenant="A")) as scoped:  # a reader of everything
        assert visible(scoped) == {
            "jobs": {active},
            "history": {finished},
            "events": set(),
            "dead_letters": {finished},
            "queues": {"qA"},
        }
        scoped.execute("SET pgsched.tenant = 'B'")  # the binding, not the setting, decides
        scoped.execute("SET ROLE pgsched_worker")
        assert visible(scoped)["jobs"] == {active}


@pytest.mark.parametrize("setting", [None, ""])
def test_a_tenant_scoped_role_without_a_tenant_sees_nothing(
    make_role: MakeRole, tenant_jobs: dict[str | None, list[int]], setting: str | None
) -> None:
    assert tenant_jobs
    with connect(make_role("pgsched_worker", "pgsched_tenant_scoped")) as scoped:
        if setting is not None:
            scoped.execute("SELECT set_config('pgsched.tenant', %s, false)", [setting])
        assert visible(scoped) == NOTHING


def test_other_roles_see_every_tenant(make_role: MakeRole, tenant_jobs: dict[str | None, list[int]]) -> None:
    with connect(make_role("pgsched_worker")) as unscoped:
        seen = visible(unscoped)
        unscoped.execute("SET pgsched.tenant = 'A'")  # an unconfined login may narrow itself
        assert visible(unscoped)["jobs"] == {tenant_jobs["A"][0]}
    assert seen["jobs"] == {ids[0] for ids in tenant_jobs.values()}
    assert seen["history"] == {ids[1] for ids in tenant_jobs.values()}
    assert seen["queues"] == {"qA", "qB", "qNone"}


def test_a_tenant_scoped_role_enqueues_only_for_its_tenant(conn: Conn, make_role: MakeRole) -> None:
    with connect(make_role("pgsched_enqueue", tenant="A")) as scoped:
        own = enqueue(scoped, tenant="A")
        scoped.execute("INSERT INTO pgsched.jobs (task, args, tenant) VALUES ('t', '{}', 'A')")
        assert len(enqueue_many(scoped, ["t", "t"], tenants=["A", "A"])) == 2
        for attempt in (
            lambda: enqueue(scoped, tenant="B"),
            lambda: enqueue_many(scoped, ["t", "t"], tenants=["A", "B"]),
            lambda: scoped.execute("INSERT INTO pgsched.jobs (task, args, tenant) VALUES ('t', '{}', 'B')"),
        ):
            with refused(DENIED):
                attempt()
        scoped.execute("SET pgsched.tenant = 'B'")
        with refused(DENIED):
            enqueue(scoped, tenant="B")
        # no tenant is not "any tenant": it is its own (issue 21.3)
        enqueue(scoped)
        enqueue_many(scoped, ["t"])
        scoped.execute("INSERT INTO pgsched.jobs (task, args) VALUES ('t', '{}')")
    tenants = [r["tenant"] for r in conn.execute("SELECT tenant FROM pgsched.jobs").fetchall()]
    assert tenants == ["A"] * 7
    assert job(conn, own) is not None


def test_a_tenant_scoped_admin_cannot_touch_other_tenants_jobs(
    conn: Conn, make_role: MakeRole, tenant_jobs: dict[str | None, list[int]]
) -> None:
    before = snapshot(conn)
    with connect(make_role("pgsched_admin", tenant="A")) as scoped:
        for tenant in ("B", None):
            active, finished = tenant_jobs[tenant]
            assert cancel(scoped, active) == "not_found"
            assert retry(scoped, finished) == "not_found"
        assert snapshot(conn) == before
        assert cancel(scoped, tenant_jobs["A"][0]) == "cancelled"
        assert retry(scoped, tenant_jobs["A"][1]) == "retried"
        scoped.execute("SET ROLE pgsched_admin")
        assert cancel(scoped, tenant_jobs["B"][0]) == "not_found"


def test_the_owner_is_not_confined(conn: Conn) -> None:
    conn.execute("SET pgsched.tenant = 'A'")
    assert enqueue(conn, tenant="B") > 0
    assert enqueue(conn) > 0


# -- a real worker process ------------------------------------------------


def _run_worker(role_dsn: str, *, check_schema: bool) -> tuple[int, list[int]]:
    app = App(role_dsn)
    seen: list[int] = []

    @app.task(name="t")
    def t(n: int) -> None:
        seen.append(n)

    options = WorkerOptions(
        queues=["default"],
        burst=True,
        install_signal_handlers=False,
        check_schema=check_schema,
        poll_interval=0.1,
        shutdown_timeout=5,
    )
    outcome: list[int | BaseException] = []

    def run() -> None:
        try:
            outcome.append(Worker(app, options).run())
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(60)
    app.close()
    assert not runner.is_alive(), "the worker did not stop after the work ran out"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0], sorted(seen)


def _enqueue_work(conn: Conn, now: datetime) -> list[int]:
    ids = enqueue_many(conn, ["t"] * 20, args=[{"n": i} for i in range(20)])
    enqueue(conn, "t", {"n": 99}, run_at=now + timedelta(hours=1))  # not due: left alone
    return ids


def test_a_worker_connected_as_the_worker_role_completes_jobs(conn: Conn, make_role: MakeRole, now: datetime) -> None:
    ids = _enqueue_work(conn, now)
    code, seen = _run_worker(make_role("pgsched_worker"), check_schema=False)
    assert code == 0
    assert seen == list(range(20))
    assert {state for i in ids for state in [h["state"] for h in history(conn, i)]} == {"completed"}
    assert scalar(conn, "SELECT count(*) FROM pgsched.jobs") == 1


def test_a_worker_role_passes_the_schema_check(conn: Conn, make_role: MakeRole, now: datetime) -> None:
    _enqueue_work(conn, now)
    code, seen = _run_worker(make_role("pgsched_worker"), check_schema=True)
    assert code == 0
    assert seen == list(range(20))
