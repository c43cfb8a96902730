"""Progress reports and durable steps as real logins: a tenant-bound worker writes only its tenant's jobs (tokens
are guessable, tenants are not), and roles without the worker grant write none."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from tests.security.conftest import DENIED, Deployment, everything
from tests.sql.helpers import Conn, claim_one, enqueue, refused, scalar


def _running(owner: Conn, tenant: str | None, queue: str) -> tuple[int, int]:
    enqueue(owner, queue=queue, tenant=tenant)
    got = claim_one(owner, queues=[queue])
    return int(got["id"]), int(got["lease_token"])


def _progress(conn: Conn, job: tuple[int, int], fraction: float) -> bool:
    row = conn.execute(
        "SELECT kept FROM pgsched.report_progress(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ARRAY[%s]::real[])",
        [job[0], job[1], fraction],
    ).fetchone()
    assert row is not None
    return bool(row["kept"])


def _step(conn: Conn, job: tuple[int, int], name: str) -> str:
    return str(scalar(conn, "SELECT pgsched.record_step(%s, %s, %s, %s)", [job[0], job[1], name, Jsonb(1)]))


def test_a_bound_worker_reports_and_records_only_for_its_tenants_jobs(deployment: Deployment, owner: Conn) -> None:
    own = _running(owner, "acme", "q_acme")
    others = [_running(owner, "globex", "q_globex"), _running(owner, None, "q_none")]
    worker = deployment.login("pgsched_worker", tenant="acme")
    before = everything(owner)
    for job in others:
        assert _progress(worker, job, 0.5) is False
        assert _step(worker, job, "x") == "lease_lost"
    assert everything(owner) == before
    assert _progress(worker, own, 0.5) is True
    assert _step(worker, own, "x") == "recorded"
    row = owner.execute("SELECT progress, steps FROM pgsched.jobs WHERE id = %s", [own[0]]).fetchone()
    assert row is not None
    assert row["progress"] == 0.5
    assert [s["name"] for s in row["steps"]] == ["x"]


def test_only_the_worker_grant_writes_progress_and_steps(deployment: Deployment, owner: Conn) -> None:
    job = _running(owner, None, "q")
    before = everything(owner)
    for granted in ("pgsched_enqueue", "pgsched_command"):
        login = deployment.login(granted)
        with refused(DENIED):
            _progress(login, job, 0.5)
        with refused(DENIED):
            _step(login, job, "x")
    assert everything(owner) == before
