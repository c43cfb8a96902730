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
