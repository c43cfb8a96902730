"""Issue 8.2: a tenant-bound login stays in its tenant on every path, whatever it SETs."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.security.conftest import DENIED, Deployment, everything
from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    complete,
    enqueue,
    enqueue_many,
    fail,
    heartbeat,
    pair,
    refused,
    release,
    retry,
    scalar,
    snooze,
)

TENANTS = ("acme", "globex", None)


@pytest.fixture
def seeded(owner: Conn) -> dict[str | None, dict[str, Any]]:
    """Per tenant (and no tenant): an available job with a key, a running one, a dead one, a schedule."""
    made: dict[str | None, dict[str, Any]] = {}
    owner.execute("""SELECT pgsched.register_tasks('[{"name": "t", "max_attempts": 3}]')""")
    owner.execute("SELECT pgsched.pause_queue('shared'), pgsched.resume_queue('shared')")
    for tenant in TENANTS:
        q = f"q_{tenant}"
        dead = enqueue(owner, queue=q, tenant=tenant, max_attempts=1, args={"secret": f"{tenant}-dead"})
        fail(owner, *pair(claim_one(owner, queues=[q])))
        running = enqueue(owner, queue=q, tenant=tenant, args={"secret": f"{tenant}-running"})
        lease = claim_one(owner, queues=[q])
        waiting = enqueue(owner, queue=q, tenant=tenant, idempotency_key="k", args={"secret": f"{tenant}-waiting"})
        owner.execute(
            "SELECT pgsched.upsert_schedule(name => %s, cron => '0 * * * *', task => 't', tenant => %s)",
            [f"s_{tenant}", tenant],
        )
        made[tenant] = {"dead": dead, "running": running, "token": lease["lease_token"], "waiting": waiting, "queue": q}
    return made


def seen(c: Conn) -> dict[str, set[Any]]:
    def col(query: str) -> set[Any]:
        return {next(iter(r.values())) for r in c.execute(query).fetchall()}

    found = {
        "jobs": col("SELECT id FROM pgsched.jobs"),
        "args": col("SELECT args->>'secret' FROM pgsched.jobs"),
        "history": col("SELECT id FROM pgsched.job_history"),
        "dead_letters": col("SELECT id FROM pgsched.dead_letters"),
        "queue_stats": col("SELECT queue FROM pgsched.queue_stats WHERE available + running > 0"),
    }
    if scalar(c, "SELECT has_table_privilege('pgsched.job_events', 'SELECT')"):
        found["events"] = col("SELECT job_id FROM pgsched.job_events")
        found["timeline"] = col("SELECT job_id FROM pgsched.job_timeline")
        found["keys"] = col("SELECT job_id FROM pgsched.idempotency_keys")
        found["schedules"] = col("SELECT name FROM pgsched.schedules")
        found["schedule_status"] = col("SELECT name FROM pgsched.schedule_status")
        found["occurrences"] = col("SELECT schedule FROM pgsched.schedule_occurrences")
    return found


def only(made: dict[str, Any], *, worker: bool) -> dict[str, set[Any]]:
    expected = {
        "jobs": {made["running"], made["waiting"]},
        "args": {f"{made['tenant']}-running", f"{made['tenant']}-waiting"},
        "history": {made["dead"]},
        "dead_letters": {made["dead"]},
        "queue_stats": {made["queue"]},
    }
    if worker:
        expected |= {
            "events": set(),  # events carry no tenant: a confined session sees none
            # the view runs with the reader's rights: its own running job's claim, derived from
            # the row; the dead job's claim and death are recorded events, which it does not see
            "timeline": {made["running"]},
            "keys": {made["waiting"]},
            "schedules": {f"s_{made['tenant']}"},
            "schedule_status": {f"s_{made['tenant']}"},
            "occurrences": set(),
        }
    return expected


@pytest.mark.parametrize("granted", ["pgsched_enqueue", "pgsched_worker", "pgsched_admin"])
def test_a_bound_login_reads_only_its_tenant_whatever_it_sets(
    deployment: Deployment, seeded: dict[str | None, dict[str, Any]], granted: str
) -> None:
    acme = deployment.login(granted, tenant="acme")
    expected = only({**seeded["acme"], "tenant": "acme"}, worker=granted != "pgsched_enqueue")
    assert seen(acme) == expected
    for escape in (
        "SET ROLE pgsched_enqueue",
        "SET ROLE pgsched_worker",
        "SET pgsched.tenant = 'globex'",
        "SET pgsched.tenant = ''",
        "SET SESSION AUTHORIZATION DEFAULT",
    ):
        try:
            acme.execute(escape)
        except psycopg.Error:  # some escapes are refused outright; what matters is what it reads
            continue
        got = seen(acme)  # SET ROLE pgsched_enqueue also drops the worker's privileges: fewer tables to read
        assert got == {k: expected[k] for k in got}, escape
        assert got["jobs"] == expected["jobs"]
    acme.execute("RESET ALL")
    acme.execute("RESET ROLE")


def test_a_scoped_login_without_a_binding_sees_and_writes_nothing(
    deployment: Deployment, owner: Conn, seeded: dict[str | None, dict[str, Any]]
) -> None:
    before = everything(owner)
    scoped = deployment.login("pgsched_admin", "pgsched_tenant_scoped")
    scoped.execute("SET pgsched.tenant = 'acme'")  # not trusted to choose
    assert not any(seen(scoped).values())
    assert claim(scoped, queues=["q_acme"]) == []
    for attempt in (
        lambda: enqueue(scoped, tenant="acme"),
        lambda: enqueue(scoped),
        lambda: scoped.execute("INSERT INTO pgsched.jobs (task, args, tenant) VALUES ('t', '{}', 'acme')"),
    ):
        with refused(DENIED):
            attempt()
    assert cancel(scoped, seeded["acme"]["waiting"]) == "not_found"
    assert everything(owner) == before


def test_a_bound_login_enqueues_only_for_its_tenant(deployment: Deployment, owner: Conn) -> None:
    acme = deployment.login("pgsched_enqueue", tenant="acme")
    own = enqueue(acme, tenant="acme")
    acme.execute("INSERT INTO pgsched.jobs (task, args, tenant) VALUES ('t', '{}', 'acme')")
    assert len(enqueue_many(acme, ["t", "t"], tenants=["acme", "acme"])) == 2
    before = everything(owner)
    acme.execute("SET ROLE pgsched_enqueue")
    acme.execute("SET pgsched.tenant = 'globex'")
    for attempt in (
        lambda: enqueue(acme, tenant="globex"),
        lambda: enqueue(acme, tenant="globex", idempotency_key="k"),
        lambda: enqueue_many(acme, ["t", "t"], tenants=["acme", "globex"]),
        lambda: acme.execute("INSERT INTO pgsched.jobs (task, args, tenant) VALUES ('t', '{}', 'globex')"),
        lambda: acme.execute(
            "INSERT INTO pgsched.jobs (task, args, tenant, idempotency_key) VALUES ('t', '{}', 'globex', 'k')"
        ),
    ):
        with refused(DENIED):
            attempt()
    assert everything(owner) == before
    assert scalar(owner, "SELECT tenant FROM pgsched.jobs WHERE id = %s", [own]) == "acme"
    # Naming no tenant is not "any tenant" either: it is its own (issue 21.3), whatever it SET.
    ids = [enqueue(acme), *enqueue_many(acme, ["t"])]
    acme.execute("INSERT INTO pgsched.jobs (task, args) VALUES ('t', '{}')")
    rows = owner.execute("SELECT id, tenant FROM pgsched.jobs WHERE id <> ALL(%s)", [[r["id"] for r in before["jobs"]]])
    assert {r["tenant"] for r in rows.fetchall()} == {"acme"}
    assert set(ids) <= {r["id"] for r in owner.execute("SELECT id FROM pgsched.jobs WHERE tenant = 'acme'").fetchall()}


def test_a_bound_worker_claims_and_finishes_only_its_tenants_jobs(
    deployment: Deployment, owner: Conn, seeded: dict[str | None, dict[str, Any]]
) -> None:
    worker = deployment.login("pgsched_worker", tenant="acme")
    worker.execute("SET ROLE pgsched_worker")
    before = everything(owner)
    queues = [seeded[t]["queue"] for t in TENANTS]
    # Fencing tokens are sequential, so guessable: the tenant is checked, not only the token.
    others = [(seeded[t]["running"], seeded[t]["token"]) for t in ("globex", None)]
    assert heartbeat(worker, others) == {i: (False, False) for i, _ in others}
    assert complete(worker, others) == {i: False for i, _ in others}
    for i, token in others:
        assert fail(worker, i, token) == "lease_lost"
        assert snooze(worker, i, token, scalar(owner, "SELECT now()")) == "lease_lost"
    assert {r["outcome"] for r in release(worker, others)} == {"lease_lost"}
    assert everything(owner) == before
    got = claim(worker, 10, queues=queues, start_shard=None)
    assert [r["id"] for r in got] == [seeded["acme"]["waiting"]]
    assert {r["tenant"] for r in got} == {"acme"}
    assert complete(worker, [pair(got[0])]) == {got[0]["id"]: True}
    for t in ("globex", None):
        assert (
            scalar(owner, "SELECT state::text FROM pgsched.jobs WHERE id = %s", [seeded[t]["waiting"]]) == "available"
        )


def test_a_bound_login_reads_only_its_own_jobs_timeline(
    deployment: Deployment, owner: Conn, seeded: dict[str | None, dict[str, Any]]
) -> None:
    """job_timeline derives claims and completions from jobs/job_history: their row-level security holds."""
    for t in TENANTS:  # each tenant's waiting job succeeds at its first claim: nothing recorded
        got = claim(owner, 10, queues=[seeded[t]["queue"]], start_shard=None)
        assert [r["id"] for r in got] == [seeded[t]["waiting"]]
        complete(owner, [pair(got[0])])
    rows = "SELECT job_id, kind, source FROM pgsched.job_timeline WHERE source = 'derived' ORDER BY job_id, at"
    everyone = owner.execute(rows).fetchall()
    assert {r["job_id"] for r in everyone} == {seeded[t][k] for t in TENANTS for k in ("running", "waiting")}
    for granted in ("pgsched_worker", "pgsched_admin"):
        acme = deployment.login(granted, tenant="acme")
        mine = {seeded["acme"]["running"], seeded["acme"]["waiting"]}
        assert acme.execute(rows).fetchall() == [r for r in everyone if r["job_id"] in mine]
        assert [r["kind"] for r in acme.execute(rows).fetchall() if r["job_id"] == seeded["acme"]["waiting"]] == [
            "claimed",
            "completed",
        ]
        for other in ("globex", None):
            for k in ("running", "waiting", "dead"):
                found = scalar(acme, "SELECT count(*) FROM pgsched.job_timeline WHERE job_id = %s", [seeded[other][k]])
                assert found == 0, (granted, other, k)
    assert deployment.login("pgsched_worker").execute(rows).fetchall() == everyone


def test_a_bound_admin_cannot_touch_other_tenants(
    deployment: Deployment, owner: Conn, seeded: dict[str | None, dict[str, Any]]
) -> None:
    admin = deployment.login("pgsched_admin", tenant="acme")
    admin.execute("SET ROLE pgsched_admin")
    before = everything(owner)
    for t in ("globex", None):
        assert cancel(admin, seeded[t]["waiting"]) == "not_found"
        assert cancel(admin, seeded[t]["running"]) == "not_found"
        assert retry(admin, seeded[t]["dead"]) == "not_found"
        assert scalar(admin, "SELECT pgsched.pause_schedule(%s)", [f"s_{t}"]) is False
        assert scalar(admin, "SELECT pgsched.resume_schedule(%s)", [f"s_{t}"]) is False
        assert scalar(admin, "SELECT pgsched.remove_schedule(%s)", [f"s_{t}"]) is None
    upsert = "SELECT pgsched.upsert_schedule(name => %s, cron => '* * * * *', task => 'x', tenant => %s)"
    for statement, params in (
        (upsert, ["mine", "globex"]),
        (upsert, ["mine", None]),
        (upsert, ["s_globex", "acme"]),  # taking over another tenant's schedule by name
        ("SELECT pgsched.pause_queue('q_globex')", None),
        ("SELECT pgsched.resume_queue('q_globex')", None),
        ("UPDATE pgsched.config SET audit = false", None),
        ("UPDATE pgsched.queues SET paused = true", None),
        ("INSERT INTO pgsched.queues (name, paused) VALUES ('q_globex', true)", None),
        ("INSERT INTO pgsched.tasks (name, max_attempts) VALUES ('t', 1)", None),
        ("INSERT INTO pgsched.schedules (name, cron, task, tenant) VALUES ('x', '* * * * *', 't', 'globex')", None),
        ("UPDATE pgsched.schedules SET tenant = 'globex' WHERE name = 's_acme'", None),
        ("SELECT pgsched.bind_tenant(session_user::text::regrole, 'globex')", None),
        ("SELECT pgsched.unbind_tenant(session_user::text::regrole)", None),
        ("SELECT * FROM pgsched.acquire_shards('evil')", None),
    ):
        with refused(DENIED):
            admin.execute(statement, params)
    admin.execute("DELETE FROM pgsched.queues")
    admin.execute("DELETE FROM pgsched.schedules WHERE tenant IS DISTINCT FROM 'acme'")
    admin.execute("UPDATE pgsched.schedules SET enabled = false WHERE tenant IS DISTINCT FROM 'acme'")
    admin.execute('SELECT pgsched.register_tasks(\'[{"name": "t", "max_attempts": 1}]\')')  # acme's own policy
    after = everything(owner)
    assert {(r["name"], r["tenant"], r["max_attempts"]) for r in after.pop("tasks")} == {
        ("t", None, 3),
        ("t", "acme", 1),
    }
    before.pop("tasks")
    assert after == before
    # its own tenant, it manages
    assert cancel(admin, seeded["acme"]["waiting"]) == "cancelled"
    assert retry(admin, seeded["acme"]["dead"]) == "retried"
    assert scalar(admin, upsert, ["s_acme", "acme"]) == 2


def test_an_unbound_login_may_narrow_itself(
    deployment: Deployment, owner: Conn, seeded: dict[str | None, dict[str, Any]]
) -> None:
    worker = deployment.login("pgsched_worker")
    assert seen(worker)["jobs"] == {seeded[t][k] for t in TENANTS for k in ("running", "waiting")}
    worker.execute("SET pgsched.tenant = 'globex'")  # a filter it chose, not a boundary
    assert seen(worker)["jobs"] == {seeded["globex"]["running"], seeded["globex"]["waiting"]}
    worker.execute("RESET pgsched.tenant")
    assert len(seen(worker)["jobs"]) == 6


def test_binding_is_for_unconfined_admins_and_never_confines_the_owner(deployment: Deployment, owner: Conn) -> None:
    admin = deployment.login("pgsched_admin")
    login = deployment.login_dsn("pgsched_enqueue")
    name = login.split("user=")[1].split()[0]
    assert scalar(admin, "SELECT pgsched.bind_tenant(%s::regrole, 'acme')", [name]) is None
    assert scalar(admin, "SELECT pgsched.bind_tenant(%s::regrole, 'globex')", [name]) == "acme"
    assert scalar(owner, "SELECT tenant FROM pgsched.tenant_roles WHERE role = %s::regrole", [name]) == "globex"
    assert scalar(admin, "SELECT pgsched.unbind_tenant(%s::regrole)", [name]) == "globex"
    for never_confined in (scalar(owner, "SELECT current_user::text"), "postgres"):
        with refused("22023"):
            admin.execute("SELECT pgsched.bind_tenant(%s::regrole, 'acme')", [never_confined])
    assert scalar(owner, "SELECT count(*) FROM pgsched.tenant_roles") == 0
