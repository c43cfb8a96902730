"""pgsched.job() runs as the owner, who bypasses row-level security: it must confine tenants itself."""

from __future__ import annotations

from tests.security.conftest import Deployment, everything
from tests.sql.helpers import Conn, claim_one, complete, enqueue, fail, pair


def test_a_tenant_cannot_look_up_another_tenants_job(deployment: Deployment, owner: Conn) -> None:
    active = enqueue(owner, args={"secret": "globex-active"}, tenant="globex")
    done = enqueue(owner, queue="g2", tenant="globex")
    complete(owner, [pair(claim_one(owner, queues=["g2"]))])
    dead = enqueue(owner, queue="g3", tenant="globex", max_attempts=1)
    fail(owner, *pair(claim_one(owner, queues=["g3"])), "globex secret")
    untenanted = enqueue(owner)
    own = enqueue(owner, tenant="acme")
    granted = ("pgsched_enqueue", "pgsched_worker", "pgsched_admin")
    logins = [deployment.login(role, tenant="acme") for role in granted]
    globex = deployment.login("pgsched_enqueue", tenant="globex")
    before = everything(owner)

    for acme in logins:
        for job_id in (active, done, dead, untenanted, 10_000_000):
            # Another tenant's job, active or finished, is no row, exactly like an id that never existed.
            assert acme.execute("SELECT * FROM pgsched.job(%s)", [job_id]).fetchall() == []
        acme.execute("SET pgsched.tenant = 'globex'")  # a bound login's setting moves nothing
        assert acme.execute("SELECT * FROM pgsched.job(%s)", [active]).fetchall() == []
        rows = acme.execute("SELECT id, tenant, stored_in FROM pgsched.job(%s)", [own]).fetchall()
        assert rows == [{"id": own, "tenant": "acme", "stored_in": "jobs"}]

    rows = [globex.execute("SELECT id, state FROM pgsched.job(%s)", [j]).fetchone() for j in (active, done, dead)]
    assert rows == [
        {"id": active, "state": "available"},
        {"id": done, "state": "completed"},
        {"id": dead, "state": "dead"},
    ]
    assert everything(owner) == before
