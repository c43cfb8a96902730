"""Issue 8.3 and 8.4: idempotency keys belong to their tenant; a plain INSERT cannot forge."""

from __future__ import annotations

import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from tests.security.conftest import DENIED, Deployment, everything
from tests.sql.helpers import Conn, cancel, claim_one, complete, enqueue, enqueue_many, pair, refused, scalar


def test_a_key_is_unique_per_tenant(deployment: Deployment, owner: Conn) -> None:
    acme = deployment.login("pgsched_enqueue", tenant="acme")
    globex = deployment.login("pgsched_enqueue", tenant="globex")
    theirs = enqueue(globex, tenant="globex", idempotency_key="order-1")
    mine = enqueue(acme, tenant="acme", idempotency_key="order-1")  # globex's key: acme gets its own job
    assert mine != theirs
    assert enqueue(acme, tenant="acme", idempotency_key="order-1") == mine
    assert enqueue_many(acme, ["t"], idempotency_keys=["order-1"], tenants=["acme"]) == [mine]
    untenanted = enqueue(owner, idempotency_key="order-1")  # no tenant is its own space
    assert len({theirs, mine, untenanted}) == 3
    assert enqueue(owner, idempotency_key="order-1") == untenanted
    rows = owner.execute("SELECT tenant, job_id FROM pgsched.idempotency_keys ORDER BY job_id").fetchall()
    assert rows == [
        {"tenant": "globex", "job_id": theirs},
        {"tenant": "acme", "job_id": mine},
        {"tenant": None, "job_id": untenanted},
    ]


def test_a_squatted_key_does_not_swallow_another_tenants_job(deployment: Deployment, owner: Conn) -> None:
    acme = deployment.login("pgsched_enqueue", tenant="acme")
    globex = deployment.login("pgsched_enqueue", tenant="globex")
    squat = enqueue(acme, tenant="acme", idempotency_key="invoice-77")
    acme.execute("INSERT INTO pgsched.jobs (task, args, tenant, idempotency_key) VALUES ('t', '{}', 'acme', 'x')")
    # later, globex's real job with that key: it exists, and it is globex's
    real = enqueue(globex, "bill", tenant="globex", idempotency_key="invoice-77")
    globex.execute(
        "INSERT INTO pgsched.jobs (task, args, tenant, idempotency_key) VALUES ('bill', '{}', 'globex', 'x')"
    )
    assert real != squat
    rows = owner.execute("SELECT task, tenant FROM pgsched.jobs WHERE tenant = 'globex' ORDER BY id").fetchall()
    assert rows == [{"task": "bill", "tenant": "globex"}] * 2
    # and after acme's job finished, within the retention window, still separate
    worker = deployment.login("pgsched_worker")
    got = claim_one(worker)
    assert complete(worker, [pair(got)]) == {got["id"]: True}
    assert enqueue(globex, "bill", tenant="globex", idempotency_key="invoice-77") == real


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("id", "1"),
        ("shard", "3"),
        ("created_at", "'1970-01-01'"),
        ("schedule", "'nightly'"),
        ("state", "'running'"),
        ("lease_token", "1"),
        ("attempt", "5"),
    ],
)
def test_an_enqueuer_cannot_name_trusted_columns(deployment: Deployment, owner: Conn, column: str, value: str) -> None:
    enqueue(owner)
    before = everything(owner)
    app = deployment.login("pgsched_enqueue")
    with refused(DENIED):
        app.execute(
            sql.SQL("INSERT INTO pgsched.jobs (task, args, {}) VALUES ('t', '{{}}', {})").format(
                sql.Identifier(column),
                sql.SQL(value),  # type: ignore[arg-type]
            )
        )
    assert everything(owner) == before


def test_a_table_wide_insert_still_gets_its_id_and_timestamp_from_the_database(
    deployment: Deployment, owner: Conn, admin_dsn: str
) -> None:
    """A writer granted INSERT on the whole table (outside pgsched's roles) passes the untrusted trigger."""
    original = enqueue(owner, idempotency_key="k")
    shard = scalar(owner, "SELECT shard FROM pgsched.jobs WHERE id = %s", [original])
    writer = deployment.login("pgsched_enqueue")
    login = scalar(writer, "SELECT session_user::text")
    owner.execute(sql.SQL("GRANT INSERT ON pgsched.jobs TO {}").format(sql.Identifier(login)))
    before = everything(owner)
    with refused(DENIED):
        writer.execute(
            "INSERT INTO pgsched.jobs (id, shard, task, args, schedule) VALUES (%s, %s, 't', '{}', 'nightly')",
            [original, (shard + 1) % 8],
        )
    assert everything(owner) == before
    row = writer.execute(
        "INSERT INTO pgsched.jobs (id, shard, task, args, created_at) VALUES (%s, %s, 't', '{}', '1970-01-01') "
        "RETURNING id, created_at > now() - interval '1 hour' AS fresh",
        [original, (shard + 1) % 8],
    ).fetchone()
    assert row is not None
    assert row["id"] != original
    assert row["fresh"]
    assert cancel(owner, original) == "cancelled"  # one row per id: no "more than one row"


@pytest.mark.parametrize("role", ["pgsched_admin", "pgsched_worker"])
def test_a_session_setting_does_not_let_an_owner_function_skip_the_insert_trigger(
    deployment: Deployment, owner: Conn, role: str
) -> None:
    """The owner's insert trigger keys on the row, not on a setting a caller can SET: a redrive (retry, as an
    admin) and an expanded schedule (add_occurrences, as a worker keeping time) still get its defaults and checks."""
    login = deployment.login(role)
    login.execute("SET pgsched.trusted_insert = 'on'")
    if role == "pgsched_admin":
        job_id = enqueue(owner, max_attempts=3)
        assert cancel(owner, job_id) == "cancelled"
        assert scalar(login, "SELECT pgsched.retry(%s)", [job_id]) == "retried"
        row = owner.execute("SELECT attempt, max_attempts, created_at FROM pgsched.jobs WHERE id = %s", [job_id])
        got = row.fetchone()
        assert got is not None
        # the trigger's default budget on top of the attempts used (0), not the unchecked 1,000,000
        default = scalar(owner, "SELECT default_max_attempts FROM pgsched.config")
        assert (got["attempt"], got["max_attempts"]) == (0, default)
    else:
        owner.execute("SELECT pgsched.upsert_schedule('nightly', '* * * * *', 't')")
        sched = owner.execute("SELECT shard, version FROM pgsched.schedules WHERE name = 'nightly'").fetchone()
        assert sched is not None
        leases = login.execute("SELECT shard, epoch FROM pgsched.acquire_idle_shards('keeper', '1 minute')").fetchall()
        epoch = {r["shard"]: r["epoch"] for r in leases}[sched["shard"]]
        fire = scalar(owner, "SELECT date_trunc('minute', now()) + interval '1 minute'")
        occurrence = [{"fire_at": fire.isoformat(), "decision": "fire"}]
        for _ in range(2):  # the second filing of the same occurrence is the trigger's to deduplicate
            login.execute(
                "SELECT pgsched.add_occurrences('keeper', %s, %s, 'nightly', %s, %s, %s, %s)",
                [sched["shard"], epoch, sched["version"], Jsonb(occurrence), fire, fire],
            )
        rows = owner.execute("SELECT id, attempt, max_attempts FROM pgsched.jobs WHERE schedule = 'nightly'").fetchall()
        default = scalar(owner, "SELECT default_max_attempts FROM pgsched.config")
        assert [(r["attempt"], r["max_attempts"]) for r in rows] == [(0, default)]
        assert scalar(owner, "SELECT count(*) FROM pgsched.idempotency_keys WHERE job_id = %s", [rows[0]["id"]]) == 1
