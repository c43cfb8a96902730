"""Issue 21.3: task policies are per tenant. A tenant-bound login's registrations apply to its own tenant only;
the policy every tenant shares is set only by an unconfined role. A tenant-bound login's enqueue without a
tenant is its own tenant's job."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from tests.security.conftest import DENIED, Deployment
from tests.sql.helpers import Conn, claim_one, enqueue, enqueue_many, refused, scalar

HOSTILE = [{"name": "shared.task", "max_attempts": 1, "timeout": 2, "labels": ["nobody-offers"]}]


def register(conn: Conn, tasks: list[dict[str, Any]]) -> int:
    return int(scalar(conn, "SELECT pgsched.register_tasks(%s)", [Jsonb(tasks)]))


def policy_of(owner: Conn, job_id: int) -> dict[str, Any]:
    """What a job took from the task policy: max_attempts, labels, and the run limit start() sets."""
    row = owner.execute(
        "SELECT max_attempts, labels, tenant, shard FROM pgsched.jobs WHERE id = %s", [job_id]
    ).fetchone()
    assert row is not None
    return row


def test_a_tenant_bound_workers_task_policy_applies_to_its_own_tenant_only(deployment: Deployment, owner: Conn) -> None:
    acme = deployment.login("pgsched_worker", "pgsched_enqueue", tenant="acme")
    globex = deployment.login("pgsched_worker", "pgsched_enqueue", tenant="globex")
    assert register(acme, HOSTILE) == 1

    theirs = enqueue(globex, "shared.task", tenant="globex")
    mine = enqueue(acme, "shared.task", tenant="acme")
    untenanted = enqueue(owner, "shared.task")
    batch = enqueue_many(globex, ["shared.task"], tenants=["globex"])[0]
    keyed = enqueue_many(globex, ["shared.task"], tenants=["globex"], idempotency_keys=["k"])[0]
    for job_id in (theirs, untenanted, batch, keyed):
        row = policy_of(owner, job_id)
        assert (row["max_attempts"], row["labels"]) == (5, []), row
    assert (policy_of(owner, mine)["max_attempts"], policy_of(owner, mine)["labels"]) == (1, ["nobody-offers"])
    for job_id in (
        enqueue_many(acme, ["shared.task"])[0],
        enqueue_many(acme, ["shared.task"], idempotency_keys=["k"])[0],
    ):
        assert (policy_of(owner, job_id)["max_attempts"], policy_of(owner, job_id)["labels"]) == (1, ["nobody-offers"])

    # globex's job runs without a deadline it never asked for, and retries with the install's backoff
    lease = claim_one(globex, queues=["default"])
    assert lease["id"] in (theirs, batch, keyed)
    started = owner.execute(
        "SELECT * FROM pgsched.start(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])", [lease["id"], lease["lease_token"]]
    ).fetchone()
    assert started is not None
    assert started["timeout"] is None
    row = owner.execute("SELECT deadline_at FROM pgsched.jobs WHERE id = %s", [lease["id"]]).fetchone()
    assert row is not None
    assert row["deadline_at"] is None
    failed = scalar(globex, "SELECT pgsched.fail(%s, %s, 'boom')", [lease["id"], lease["lease_token"]])
    assert failed == "scheduled"  # not dead: max_attempts 5, not acme's 1

    # a plain INSERT of globex takes no policy of acme's either
    globex.execute("INSERT INTO pgsched.jobs (task, args, tenant) VALUES ('shared.task', '{}', 'globex')")
    row = owner.execute(
        "SELECT max_attempts, labels FROM pgsched.jobs WHERE tenant = 'globex' ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert row is not None
    assert (row["max_attempts"], row["labels"]) == (5, [])


def test_only_an_unconfined_role_sets_the_policy_every_tenant_shares(deployment: Deployment, owner: Conn) -> None:
    acme = deployment.login("pgsched_worker", "pgsched_enqueue", tenant="acme")
    register(owner, [{"name": "shared.task", "max_attempts": 7}])
    register(acme, HOSTILE)  # its own policy, beside the shared one
    rows = owner.execute(
        "SELECT tenant, max_attempts FROM pgsched.tasks WHERE name = 'shared.task' ORDER BY tenant NULLS FIRST"
    ).fetchall()
    assert [(r["tenant"], r["max_attempts"]) for r in rows] == [(None, 7), ("acme", 1)]
    assert policy_of(owner, enqueue(owner, "shared.task", tenant="globex"))["max_attempts"] == 7
    assert policy_of(owner, enqueue(owner, "shared.task", tenant="acme"))["max_attempts"] == 1
    # naming another tenant, or none, in the registration is refused
    for tenant in ("globex", None):
        with refused(DENIED):
            register(acme, [{"name": "shared.task", "max_attempts": 2, "tenant": tenant}])
    # an unconfined role may register a policy for one tenant
    register(owner, [{"name": "shared.task", "max_attempts": 4, "tenant": "globex"}])
    assert policy_of(owner, enqueue(owner, "shared.task", tenant="globex"))["max_attempts"] == 4


def test_a_tenant_bound_login_enqueues_into_its_own_tenant_by_default(deployment: Deployment, owner: Conn) -> None:
    acme = deployment.login("pgsched_enqueue", tenant="acme")
    assert policy_of(owner, enqueue(acme, "t"))["tenant"] == "acme"
    assert policy_of(owner, enqueue_many(acme, ["t", "t"])[1])["tenant"] == "acme"
    key = enqueue(acme, "t", idempotency_key="k")
    assert enqueue(acme, "t", idempotency_key="k", tenant="acme") == key  # the same key space
    with refused(DENIED):
        enqueue(acme, "t", tenant="globex")
    unbound = deployment.login("pgsched_enqueue", "pgsched_tenant_scoped")
    with refused(DENIED):
        enqueue(unbound, "t")  # bound to nothing: still refused
