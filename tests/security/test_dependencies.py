"""Job dependencies across tenants: a bound login depends only on jobs it may see, and learns nothing of others."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from tests.security.conftest import Deployment, everything
from tests.sql.helpers import Conn, claim_one, complete, enqueue, enqueue_many, fail, pair, scalar

UNKNOWN = "23503"  # foreign_key_violation: no such job


def refusal(attempt: Callable[[], object]) -> str:
    """The message of the refusal (primary and hint), which must be 'no such job'."""
    with pytest.raises(psycopg.Error) as info:
        attempt()
    assert info.value.sqlstate == UNKNOWN, (info.value.sqlstate, str(info.value))
    return f"{info.value.diag.message_primary} | {info.value.diag.message_hint}"


def test_a_tenant_cannot_depend_on_or_learn_about_another_tenants_job(deployment: Deployment, owner: Conn) -> None:
    active = enqueue(owner, tenant="globex")
    done = enqueue(owner, queue="g2", tenant="globex")
    complete(owner, [pair(claim_one(owner, queues=["g2"]))])
    dead = enqueue(owner, queue="g3", tenant="globex", max_attempts=1)
    fail(owner, *pair(claim_one(owner, queues=["g3"])))
    missing = 10_000_000
    globex_waiting = enqueue(owner, tenant="globex", depends_on=[active])

    acme = deployment.login("pgsched_enqueue", tenant="acme")
    before = everything(owner)
    messages = {}
    for name, job_id in (("active", active), ("done", done), ("dead", dead), ("missing", missing)):
        single = refusal(lambda j=job_id: enqueue(acme, tenant="acme", depends_on=[j]))
        batch = refusal(
            lambda j=job_id: enqueue_many(acme, ["t", "t"], tenants=["acme", "acme"], depends_on=[[], [-1, j]])
        )
        assert "row 2 of the batch" in batch
        named = f"depends_on {job_id}:"
        assert named in single
        assert named in batch
        messages[name] = (single.replace(named, "depends_on N:"), batch.replace(named, "depends_on N:"))
    # Another tenant's job, active, completed or dead, is refused exactly like an id that never existed.
    assert len(set(messages.values())) == 1, messages
    assert everything(owner) == before  # nothing written, no job held

    # Its own jobs it may depend on.
    mine = enqueue(acme, tenant="acme")
    dependent = enqueue(acme, tenant="acme", depends_on=[mine])
    assert scalar(owner, "SELECT state::text FROM pgsched.jobs WHERE id = %s", [dependent]) == "waiting"

    # And the dependency rows (they carry no tenant) are invisible to a confined session, also to a worker.
    worker = deployment.login("pgsched_worker", tenant="acme")
    assert scalar(owner, "SELECT count(*) FROM pgsched.job_dependencies") == 2
    assert scalar(worker, "SELECT count(*) FROM pgsched.job_dependencies") == 0
    assert scalar(worker, "SELECT count(*) FROM pgsched.jobs WHERE id = %s", [globex_waiting]) == 0
    assert not scalar(acme, "SELECT has_table_privilege('pgsched.job_dependencies', 'SELECT')")
