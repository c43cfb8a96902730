"""Dispatch policies are an admin operation: workers and applications cannot change limits, nor go around them."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from tests.security.conftest import Deployment, everything
from tests.sql.helpers import Conn, claim, enqueue_many, refused, scalar

CONFIGURE = "SELECT pgsched.configure_queue('default', concurrency => 1000, p_clear => '{rate}')"


@pytest.mark.parametrize("role", ["pgsched_worker", "pgsched_enqueue"])
def test_workers_and_applications_cannot_configure_a_queue(deployment: Deployment, owner: Conn, role: str) -> None:
    owner.execute("SELECT pgsched.configure_queue('default', concurrency => 1, rate => 1, rate_period => '1 hour')")
    before = everything(owner)
    attacker = deployment.login(role)
    with refused("42501"):
        attacker.execute(CONFIGURE)
    # Nor around the function: the table, the rate windows.
    for attempt in (
        "UPDATE pgsched.queues SET concurrency = NULL, rate = NULL, rate_period = NULL",
        "INSERT INTO pgsched.queues (name, concurrency) VALUES ('other', 5)",
        "DELETE FROM pgsched.rate_windows",
        "UPDATE pgsched.jobs SET dispatch_rank = -1000000",
    ):
        with refused("42501"):
            attacker.execute(attempt)
    assert everything(owner) == before
    assert scalar(owner, "SELECT concurrency FROM pgsched.queues WHERE name = 'default'") == 1


def test_an_application_cannot_jump_the_claim_order_with_a_plain_insert(deployment: Deployment, owner: Conn) -> None:
    app = deployment.login("pgsched_enqueue")
    for column, value in (("dispatch_rank", -1000000), ("dispatch_at", "2000-01-01"), ("dispatch_group", "")):
        with refused("42501"):
            app.execute(f"INSERT INTO pgsched.jobs (task, {column}) VALUES ('t', %s)", [value])
    # concurrency_key is the user's to choose.
    app.execute("INSERT INTO pgsched.jobs (task, concurrency_key) VALUES ('t', 'customer:1')")
    assert scalar(owner, "SELECT concurrency_key FROM pgsched.jobs") == "customer:1"


def test_an_admin_configures_a_queue_and_a_tenant_bound_admin_cannot(deployment: Deployment, owner: Conn) -> None:
    admin = deployment.login("pgsched_admin")
    settings = scalar(admin, CONFIGURE)
    assert settings["concurrency"] == 1000
    bound = deployment.login("pgsched_admin", tenant="acme")
    with refused("42501"):
        bound.execute("SELECT pgsched.configure_queue('default', p_clear => '{all}')")
    assert scalar(owner, "SELECT concurrency FROM pgsched.queues WHERE name = 'default'") == 1000


def test_a_tenant_bound_worker_is_held_to_the_global_limit_and_its_tenant(deployment: Deployment, owner: Conn) -> None:
    owner.execute("SELECT pgsched.configure_queue('default', concurrency => 3, tenant_fairness => true)")
    enqueue_many(owner, ["t"] * 10, tenants=["acme"] * 10)
    enqueue_many(owner, ["t"] * 10, tenants=["other"] * 10)
    worker = deployment.login("pgsched_worker", tenant="acme")
    got = claim(worker, 10, start_shard=None)
    assert [r["tenant"] for r in got] == ["acme"] * 3
    assert claim(deployment.login("pgsched_worker"), 10, start_shard=None) == []  # the limit is global


def test_only_the_owner_moves_next_starts_clock(deployment: Deployment) -> None:
    worker = deployment.login("pgsched_worker")
    assert scalar(worker, "SELECT pgsched.next_start(ARRAY['default'])") is None
    with pytest.raises(psycopg.Error):
        worker.execute("SELECT pgsched.next_start(ARRAY['default'], now() + %s)", [timedelta(hours=1)])


def test_an_application_cannot_forge_or_skip_the_dispatch_stamp(deployment: Deployment, owner: Conn) -> None:
    # enqueue() and enqueue_many() stamp the claim order themselves and the
    # trigger skips their rows: nothing an application sets may take that path.
    owner.execute("SELECT pgsched.configure_queue('default', aging => '10 seconds', tenant_fairness => true)")
    app = deployment.login("pgsched_enqueue")
    app.execute("SET pgsched.trusted_insert = 'on'")
    now = scalar(app, "SELECT now()")
    ids = [
        scalar(
            app,
            "INSERT INTO pgsched.jobs (task, priority, tenant, run_at) VALUES ('t', 3, 'a', %s) RETURNING id",
            [now],
        ),
        scalar(app, "SELECT pgsched.enqueue('t', priority => 3, tenant => 'a', run_at => %s)", [now]),
        *enqueue_many(app, ["t"], priorities=[3], tenants=["a"], run_ats=[now]),
    ]
    rows = owner.execute(
        "SELECT dispatch_group, dispatch_rank, dispatch_at FROM pgsched.jobs WHERE id = ANY(%s) ORDER BY id", [ids]
    ).fetchall()
    # Tenant a's place in the fair line (1 ms apart at weight 1), aged by its priority.
    assert [tuple(r.values()) for r in rows] == [
        ("*", 0, now - timedelta(seconds=30) + timedelta(milliseconds=k)) for k in range(3)
    ]
    for columns, values in (
        ("dispatch_at", "'2000-01-01'"),
        ("dispatch_group, dispatch_rank, dispatch_at", "'', -1000000, '2000-01-01'"),
    ):
        with refused("42501"):
            app.execute(f"INSERT INTO pgsched.jobs (task, {columns}) VALUES ('t', {values})")
        with refused("42501"):
            app.execute(f"COPY pgsched.jobs (task, {columns}) FROM STDIN")
    with refused("42501"):
        app.execute("UPDATE pgsched.jobs SET dispatch_at = '2000-01-01'")
    assert scalar(owner, "SELECT count(*) FROM pgsched.jobs") == 3
