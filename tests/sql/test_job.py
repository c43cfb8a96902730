"""pgsched.job(): one job wherever it is, its active row else its latest finished run; tenants stay confined."""

from __future__ import annotations

import pytest

from tests.sql.helpers import Conn, Row, claim_one, complete, enqueue, fail, pair, refused, retry
from tests.sql.test_roles import MakeRole, connect, make_role  # noqa: F401 (make_role is a fixture)


def find(conn: Conn, job_id: int) -> list[Row]:
    return conn.execute("SELECT * FROM pgsched.job(%s)", [job_id]).fetchall()


def test_an_active_job_is_its_row_in_jobs(conn: Conn) -> None:
    job_id = enqueue(conn, "mail.send", {"to": 1}, queue="mail", priority=3, idempotency_key="k1", labels=["gpu"])
    waiting = find(conn, job_id)
    assert len(waiting) == 1
    row = waiting[0]
    assert (row["id"], row["state"], row["queue"], row["task"], row["args"]) == (
        job_id,
        "available",
        "mail",
        "mail.send",
        {"to": 1},
    )
    assert (row["priority"], row["idempotency_key"], row["labels"], row["stored_in"]) == (3, "k1", ["gpu"], "jobs")
    assert (row["finished_at"], row["result"], row["leased_by"]) == (None, None, None)

    claimed = claim_one(conn, queues=["mail"], labels=["gpu"])
    [running] = find(conn, job_id)
    assert (running["state"], running["attempt"], running["lease_token"]) == ("running", 1, claimed["lease_token"])
    assert running["leased_by"] is not None
    assert running["lease_expires_at"] is not None


def test_a_finished_job_is_its_latest_history_row(conn: Conn) -> None:
    job_id = enqueue(conn, max_attempts=1)
    assert fail(conn, *pair(claim_one(conn)), "boom") == "dead"
    [dead] = find(conn, job_id)
    assert (dead["state"], dead["stored_in"], dead["error"], dead["attempt"]) == ("dead", "job_history", "boom", 1)
    assert dead["finished_at"] is not None
    assert dead["lease_expires_at"] is None

    assert retry(conn, job_id) == "retried"  # active again: the active row wins over the dead run
    [again] = find(conn, job_id)
    assert (again["state"], again["stored_in"]) == ("available", "jobs")

    got = claim_one(conn)
    assert complete(conn, [pair(got)], results=[{"ok": True}]) == {job_id: True}
    [done] = find(conn, job_id)  # two finished runs: the latest one
    assert (done["state"], done["result"], done["error"], done["stored_in"]) == (
        "completed",
        {"ok": True},
        None,
        "job_history",
    )


def test_an_unknown_id_is_no_row(conn: Conn) -> None:
    assert find(conn, 10_000_000) == []
    assert find(conn, -1) == []


@pytest.mark.parametrize("granted", ["pgsched_enqueue", "pgsched_worker", "pgsched_admin"])
def test_a_tenant_bound_session_sees_only_its_tenants_jobs(conn: Conn, make_role: MakeRole, granted: str) -> None:  # noqa: F811
    mine = enqueue(conn, tenant="A")
    theirs = enqueue(conn, tenant="B")
    nobodys = enqueue(conn)
    finished = enqueue(conn, queue="done", tenant="B")
    complete(conn, [pair(claim_one(conn, queues=["done"]))])
    with connect(make_role(granted, "pgsched_tenant_scoped", tenant="A")) as scoped:
        assert [r["id"] for r in find(scoped, mine)] == [mine]
        assert find(scoped, theirs) == []
        assert find(scoped, nobodys) == []
        assert find(scoped, finished) == []
    with connect(make_role(granted)) as unconfined:
        assert [r["id"] for j in (mine, theirs, nobodys, finished) for r in find(unconfined, j)] == [
            mine,
            theirs,
            nobodys,
            finished,
        ]
        unconfined.execute("SET pgsched.tenant = 'A'")  # a filter it chose narrows it, like row-level security
        assert find(unconfined, theirs) == []
        assert [r["id"] for r in find(unconfined, mine)] == [mine]


def test_a_role_that_may_not_read_jobs_may_not_call_it(conn: Conn, make_role: MakeRole) -> None:  # noqa: F811
    job_id = enqueue(conn)
    with connect(make_role("pgsched_command")) as commands, refused("42501"):
        find(commands, job_id)
