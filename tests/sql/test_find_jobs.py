"""pgsched.find_jobs(): jobs across queues by filter, newest first, keyset pages, row-level security applies."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from tests.sql.helpers import Conn, cancel, claim_one, enqueue, enqueue_many, fail, pair, refused, retry
from tests.sql.test_roles import MakeRole, connect, make_role  # noqa: F401 (make_role is a fixture)


def find(conn: Conn, **filters: Any) -> list[int]:
    if "p_args" in filters:
        filters["p_args"] = Jsonb(filters["p_args"])
    named = ", ".join(f"{k} => %({k})s" for k in filters)
    rows = conn.execute(f"SELECT id FROM pgsched.find_jobs({named})", filters).fetchall()
    return [r["id"] for r in rows]


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_filters_combine_and_pages_follow_ids(conn: Conn, now: datetime) -> None:
    a = enqueue(conn, "mail.send", {"to": "a", "tags": ["x"]}, queue="mail", tenant="A")
    b = enqueue(conn, "mail.digest", {"to": "b"}, queue="digest")
    c = enqueue(conn, "report.build", {"m": 1}, queue="reports", run_at=now + timedelta(hours=1))
    dead = enqueue(conn, "mail.send", {"to": "d"}, queue="dlq", max_attempts=1)
    assert fail(conn, *pair(claim_one(conn, queues=["mail"]))) == "scheduled"  # a retries later
    assert claim_one(conn, queues=["digest"])["id"] == b
    assert fail(conn, *pair(claim_one(conn, queues=["dlq"]))) == "dead"
    assert retry(conn, dead) == "retried"
    assert cancel(conn, dead) == "cancelled"  # history: dead, then cancelled; shown once, as cancelled

    assert find(conn) == [dead, c, b, a]
    assert find(conn, p_task="mail.send") == [dead, a]
    assert find(conn, p_task="mail.*") == [dead, b, a]
    assert find(conn, p_states=["cancelled"]) == [dead]
    assert find(conn, p_states=["dead"]) == []  # its latest run is the cancelled one
    assert find(conn, p_states=["running", "scheduled"]) == [c, b, a]
    assert find(conn, p_queue="reports") == [c]
    assert find(conn, p_queue="dlq", p_task="mail.send") == [dead]
    assert find(conn, p_tenant="A") == [a]
    assert find(conn, p_args={"tags": ["x"]}) == [a]
    assert find(conn, p_since=now + timedelta(minutes=30), p_time="due") == [c]
    assert find(conn, p_since=now - timedelta(minutes=1), p_time="finished") == [dead]
    assert find(conn, p_until=now - timedelta(days=1)) == []
    assert find(conn, p_limit=2) == [dead, c]
    assert find(conn, p_limit=2, p_before=c) == [b, a]
    assert find(conn, p_max_id=b) == [b, a]


def test_a_tenant_bound_session_finds_only_its_tenant(conn: Conn, make_role: MakeRole) -> None:  # noqa: F811
    mine, theirs, nobody = enqueue(conn, tenant="A"), enqueue(conn, tenant="B"), enqueue(conn)
    with connect(make_role("pgsched_worker", "pgsched_tenant_scoped", tenant="A")) as scoped:
        assert find(scoped) == [mine]
        assert find(scoped, p_tenant="B") == []
    with connect(make_role("pgsched_enqueue")) as reader:
        assert find(reader) == [nobody, theirs, mine]


@pytest.mark.parametrize("limit", [None, 0, -1, 10_001, 2_147_483_647])
def test_a_page_is_1_to_10000_jobs(conn: Conn, limit: int | None) -> None:
    enqueue_many(conn, ["t"] * 3)
    with refused("22023") as info:
        find(conn, p_limit=limit)
    assert "p_limit" in str(info.value)
    assert len(find(conn, p_limit=10_000)) == 3
