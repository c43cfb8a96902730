"""Replace, key scopes and batch callbacks across tenants: a bound login replaces and reads only its own jobs."""

from __future__ import annotations

import psycopg
import pytest

from tests.security.conftest import Deployment
from tests.sql.helpers import Conn, enqueue, job


def test_a_tenant_cannot_replace_another_tenants_job(deployment: Deployment, owner: Conn) -> None:
    globex = enqueue(owner, "t", {"v": 1}, tenant="globex", idempotency_key="k")
    acme = deployment.login("pgsched_enqueue", tenant="acme")
    with pytest.raises(psycopg.Error) as info:
        enqueue(acme, "t", {"v": 2}, tenant="globex", idempotency_key="k", on_conflict="replace")
    assert info.value.sqlstate == "42501"
    # Its own key space: the same key makes (and replaces) its own job, never globex's.
    own = enqueue(acme, "t", {"v": 3}, tenant="acme", idempotency_key="k", on_conflict="replace")
    assert enqueue(acme, "t", {"v": 4}, tenant="acme", idempotency_key="k", on_conflict="replace") == own
    assert own != globex
    row = job(owner, globex)
    assert row is not None
    assert row["args"] == {"v": 1}


def test_a_tenant_cannot_read_another_tenants_dependency_outcomes(deployment: Deployment, owner: Conn) -> None:
    member = enqueue(owner, "t", {}, tenant="globex")
    callback = enqueue(owner, "t", {}, tenant="globex", depends_on=[member], on_dependency_failure="run")
    acme = deployment.login("pgsched_worker", tenant="acme")
    assert acme.execute("SELECT * FROM pgsched.dependency_outcomes(%s)", [callback]).fetchall() == []
    globex = deployment.login("pgsched_worker", tenant="globex")
    rows = globex.execute("SELECT id, state FROM pgsched.dependency_outcomes(%s)", [callback]).fetchall()
    assert rows == [{"id": member, "state": "available"}]


def test_a_tenant_cannot_set_weights_nor_step_out_of_its_share(deployment: Deployment, owner: Conn) -> None:
    for login in (deployment.login("pgsched_admin", tenant="acme"), deployment.login("pgsched_worker")):
        with pytest.raises(psycopg.Error) as info:
            login.execute("SELECT pgsched.configure_queue('default', tenant_weights => '{\"acme\": 1000}')")
        assert info.value.sqlstate == "42501"
    assert owner.execute("SELECT tenant_weights FROM pgsched.queues").fetchall() == []
    # Nor can it move its jobs ahead in the fair line by hand.
    owner.execute("SELECT pgsched.configure_queue('default', tenant_weights => '{\"globex\": 2}')")
    acme = deployment.login("pgsched_enqueue", tenant="acme")
    job_id = enqueue(acme, "t", {}, tenant="acme")
    with pytest.raises(psycopg.Error) as info:
        acme.execute("UPDATE pgsched.jobs SET dispatch_at = '2000-01-01' WHERE id = %s", [job_id])
    assert info.value.sqlstate == "42501"
