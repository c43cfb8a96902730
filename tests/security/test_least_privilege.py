"""Issue 8.6: every documented set-up works with the least role it names, and no more."""

from __future__ import annotations

import threading

from psycopg.types.json import Jsonb

from pgsched import App
from pgsched.runtime.worker import Worker, WorkerOptions
from tests.security.conftest import DENIED, Deployment, everything
from tests.sql.helpers import Conn, enqueue_many, refused, scalar


def _run_worker(app: App) -> int:
    options = WorkerOptions(
        queues=["default"], burst=True, install_signal_handlers=False, poll_interval=0.1, shutdown_timeout=5
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
    assert not runner.is_alive(), "the worker did not stop after the work ran out"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def test_a_worker_with_cron_schedules_starts_as_a_worker_only_login(deployment: Deployment, owner: Conn) -> None:
    app = App(deployment.login_dsn("pgsched_worker"))
    seen: list[int] = []

    @app.cron("*/5 * * * *", name="report")
    @app.task(name="t")
    def t(n: int = 0) -> None:
        seen.append(n)

    enqueue_many(owner, ["t"] * 5, args=[{"n": i} for i in range(5)])
    try:
        assert _run_worker(app) == 0
    finally:
        app.close()
    assert sorted(seen) == list(range(5))
    row = owner.execute("SELECT cron, task, source, shard FROM pgsched.schedules WHERE name = 'report'").fetchone()
    assert row == {"cron": "*/5 * * * *", "task": "t", "source": "code", "shard": row["shard"] if row else None}


def test_a_worker_login_registers_only_code_schedules(deployment: Deployment, owner: Conn) -> None:
    owner.execute("SELECT pgsched.upsert_schedule('nightly', '0 3 * * *', 'backup', source => 'cli')")
    before = everything(owner)
    worker = deployment.login("pgsched_worker")
    upsert = "SELECT pgsched.upsert_schedule(name => %s, cron => '* * * * *', task => 'evil', source => %s)"
    for name, source in (("nightly", "code"), ("nightly", "cli"), ("new", "sql"), ("new", None)):
        with refused(DENIED):
            worker.execute(upsert, [name, source])
    for statement in (
        "SELECT pgsched.remove_schedule('nightly')",
        "SELECT pgsched.pause_schedule('nightly')",
        "INSERT INTO pgsched.schedules (name, cron, task) VALUES ('x', '* * * * *', 't')",
    ):
        with refused(DENIED):
            worker.execute(statement)
    assert everything(owner) == before


def test_an_admin_inserts_and_updates_schedules_directly(deployment: Deployment, owner: Conn) -> None:
    admin = deployment.login("pgsched_admin")
    admin.execute(
        "INSERT INTO pgsched.schedules (name, cron, task, args) VALUES ('direct', '0 * * * *', 't', %s)",
        [Jsonb({"a": 1})],
    )
    admin.execute("UPDATE pgsched.schedules SET cron = '30 * * * *' WHERE name = 'direct'")
    row = owner.execute("SELECT version, shard, source FROM pgsched.schedules WHERE name = 'direct'").fetchone()
    expected_shard = scalar(owner, "SELECT pgsched._shard_for_key('direct')")
    assert row == {"version": 2, "shard": expected_shard, "source": "sql"}
    admin.execute("DELETE FROM pgsched.schedules WHERE name = 'direct'")
    assert scalar(owner, "SELECT count(*) FROM pgsched.schedules") == 0
