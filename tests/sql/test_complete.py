"""pgsched.complete(): finishes only jobs whose fencing token is current, filing them in the history."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    complete,
    enqueue,
    enqueue_many,
    events,
    expire_leases,
    history,
    job,
    pair,
    scalar,
    snapshot,
)


def test_completion_moves_the_job_to_the_history(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "send", {"to": 1}, queue="mail", priority=3, labels=["eu"], tenant="acme")
    got = claim_one(conn, queues=["mail"], labels=["eu"], worker="w1", now=now)
    done_at = now + timedelta(seconds=3)
    assert complete(conn, [pair(got)], results=[{"sent": True}], now=done_at) == {job_id: True}
    assert job(conn, job_id) is None
    [row] = history(conn, job_id)
    assert row["state"] == "completed"
    assert row["result"] == {"sent": True}
    assert row["error"] is None
    assert (row["task"], row["args"], row["queue"], row["priority"], row["labels"], row["tenant"]) == (
        "send",
        {"to": 1},
        "mail",
        3,
        ["eu"],
        "acme",
    )
    assert (row["attempt"], row["lease_token"], row["leased_by"]) == (1, got["lease_token"], "w1")
    assert (row["started_at"], row["finished_at"]) == (now, done_at)
    assert [(e["kind"], e["worker"], e["token"], e["at"]) for e in events(conn, job_id)] == [
        ("claimed", "w1", got["lease_token"], now),
        ("completed", "w1", got["lease_token"], done_at),
    ]


def test_results_are_optional(conn: Conn) -> None:
    job_id = enqueue(conn)
    complete(conn, [pair(claim_one(conn))])
    assert history(conn, job_id)[0]["result"] is None


def test_a_stale_token_changes_nothing(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    old = claim_one(conn, worker="w1", now=now)
    expire_leases(conn, now=now + timedelta(minutes=1))
    new = claim_one(conn, worker="w2", now=now + timedelta(minutes=1))
    assert new["lease_token"] > old["lease_token"]
    before = snapshot(conn)
    assert complete(conn, [pair(old)], results=[{"from": "w1"}]) == {job_id: False}
    assert snapshot(conn) == before
    assert complete(conn, [pair(new)], results=[{"from": "w2"}]) == {job_id: True}
    assert [h["result"] for h in history(conn, job_id)] == [{"from": "w2"}]


def test_a_second_completion_is_refused(conn: Conn) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn)
    assert complete(conn, [pair(got)]) == {job_id: True}
    before = snapshot(conn)
    assert complete(conn, [pair(got)]) == {job_id: False}
    assert snapshot(conn) == before
    assert len(history(conn, job_id)) == 1


def test_a_job_that_is_not_running_cannot_be_completed(conn: Conn) -> None:
    job_id = enqueue(conn)
    token = scalar(conn, "SELECT pg_catalog.nextval('pgsched.lease_token_seq')")
    before = snapshot(conn)
    assert complete(conn, [(job_id, token), (987654, token)]) == {job_id: False, 987654: False}
    assert snapshot(conn) == before


def test_a_batch_accepts_each_current_token(conn: Conn, now: datetime) -> None:
    enqueue_many(conn, ["t"] * 5)
    got = claim(conn, 5, now=now)
    stale = (got[1]["id"], got[1]["lease_token"] + 10_000)
    pairs = [pair(got[0]), stale, pair(got[2]), pair(got[3]), pair(got[4])]
    result = complete(conn, pairs, results=[{"i": i} for i in range(5)], now=now)
    assert result == {g["id"]: g is not got[1] for g in got}
    assert scalar(conn, "SELECT count(*) FROM pgsched.job_history WHERE state = 'completed'") == 4
    still = job(conn, got[1]["id"])
    assert still is not None
    assert still["state"] == "running"
    assert history(conn, got[2]["id"])[0]["result"] == {"i": 2}


def test_the_shard_hint_must_match(conn: Conn) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn)
    wrong = (got["shard"] + 1) % 8
    rows = conn.execute(
        "SELECT * FROM pgsched.complete(%s, %s, NULL, %s::smallint[])",
        [[job_id], [got["lease_token"]], [wrong]],
    ).fetchall()
    assert rows == [{"job_id": job_id, "accepted": False}]
    rows = conn.execute(
        "SELECT * FROM pgsched.complete(%s, %s, NULL, %s::smallint[])",
        [[job_id], [got["lease_token"]], [got["shard"]]],
    ).fetchall()
    assert rows == [{"job_id": job_id, "accepted": True}]


def test_a_job_with_a_cancel_request_that_succeeds_is_completed(conn: Conn) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn)
    cancel(conn, job_id)
    assert complete(conn, [pair(got)]) == {job_id: True}
    assert [h["state"] for h in history(conn, job_id)] == ["completed"]
    assert cancel(conn, job_id) == "already_completed"


def test_completion_starts_the_idempotency_retention(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, idempotency_key="k")
    assert scalar(conn, "SELECT expires_at FROM pgsched.idempotency_keys WHERE key = 'k'") is None
    complete(conn, [pair(claim_one(conn, now=now))], now=now)
    assert scalar(conn, "SELECT expires_at FROM pgsched.idempotency_keys WHERE key = 'k'") == now + timedelta(days=14)
    assert scalar(conn, "SELECT job_id FROM pgsched.idempotency_keys WHERE key = 'k'") == job_id
