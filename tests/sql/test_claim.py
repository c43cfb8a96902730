"""pgsched.claim(): leases due jobs once each, in priority order, with growing fencing tokens."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from psycopg.rows import tuple_row

from pgsched.core.job import ClaimedJob
from pgsched.db import queries
from pgsched.runtime.claiming import CLAIMED_FIELDS, claimed_row
from tests.sql.helpers import (
    Conn,
    claim,
    enqueue,
    enqueue_many,
    events,
    job,
    refused,
)


def insert_on_shard(conn: Conn, shard: int, **columns: object) -> int:
    """A job on a chosen shard (a plain INSERT may name it), so ordering within one shard can be tested."""
    names = ["task", "args", "shard", *columns]
    values = ["t", "{}", shard, *columns.values()]
    placeholders = ", ".join(["%s"] * len(values))
    row = conn.execute(
        f"INSERT INTO pgsched.jobs ({', '.join(names)}) VALUES ({placeholders}) RETURNING id", values
    ).fetchone()
    assert row is not None
    return int(row["id"])


def test_claim_leases_each_due_job_once(conn: Conn, now: datetime) -> None:
    ids = set(enqueue_many(conn, ["t"] * 5))
    first = claim(conn, 3, worker="w1", now=now)
    second = claim(conn, 10, worker="w2", now=now)
    assert len(first) == 3
    assert len(second) == 2
    assert {r["id"] for r in first + second} == ids
    assert claim(conn, 10, now=now) == []


def test_claimed_job_is_leased_to_the_worker(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "send", {"to": 1}, idempotency_key="k1")
    [got] = claim(conn, 1, worker="w1", lease=timedelta(seconds=45), now=now)
    assert got["id"] == job_id
    assert got["task"] == "send"
    assert got["args"] == {"to": 1}
    assert got["attempt"] == 1
    assert got["idempotency_key"] == "k1"
    assert got["lease_token"] is not None
    assert got["lease_expires_at"] == now + timedelta(seconds=45)
    row = job(conn, job_id)
    assert row is not None
    assert row["state"] == "running"
    assert row["leased_by"] == "w1"
    assert row["lease_token"] == got["lease_token"]
    assert row["lease_expires_at"] == now + timedelta(seconds=45)
    assert row["claimed_at"] == now
    assert row["started_at"] is None  # until its handler starts: pgsched.start()
    assert row["run_at"] == got["run_at"]
    [event] = events(conn, job_id)
    assert (event["kind"], event["worker"], event["token"], event["attempt"], event["at"]) == (
        "claimed",
        "w1",
        got["lease_token"],
        1,
        now,
    )


def test_every_claim_draws_a_larger_token(conn: Conn) -> None:
    enqueue_many(conn, ["t"] * 20)
    tokens: list[int] = []
    for _ in range(4):
        tokens += [r["lease_token"] for r in claim(conn, 5)]
    assert len(tokens) == 20
    assert len(set(tokens)) == 20
    batches = [tokens[i : i + 5] for i in range(0, 20, 5)]
    assert all(max(a) < min(b) for a, b in itertools.pairwise(batches))


def test_scheduled_jobs_are_not_claimed(conn: Conn, now: datetime) -> None:
    enqueue(conn, run_at=now + timedelta(hours=1))
    assert claim(conn, now=now + timedelta(hours=2)) == []  # promotion makes it claimable, not the clock


def test_claim_takes_only_the_named_queues(conn: Conn) -> None:
    a = enqueue(conn, queue="a")
    b = enqueue(conn, queue="b")
    enqueue(conn, queue="c")
    assert claim(conn, queues=["default"]) == []
    assert {r["id"] for r in claim(conn, queues=["a", "b"])} == {a, b}


def test_priority_then_run_at_then_id_within_a_shard(conn: Conn, now: datetime) -> None:
    old_low = insert_on_shard(conn, 0, priority=0, run_at=now - timedelta(hours=1))
    new_high = insert_on_shard(conn, 0, priority=10, run_at=now)
    old_high = insert_on_shard(conn, 0, priority=10, run_at=now - timedelta(minutes=5))
    same_time_a = insert_on_shard(conn, 0, priority=5, run_at=now)
    same_time_b = insert_on_shard(conn, 0, priority=5, run_at=now)
    order = [claim(conn, 1, start_shard=0)[0]["id"] for _ in range(5)]
    assert order == [old_high, new_high, same_time_a, same_time_b, old_low]


def test_start_shard_no_longer_changes_which_jobs_of_a_queue_come_first(conn: Conn) -> None:
    """Due jobs are read from pgsched.ready in strict order over every shard: the start shard (which busy
    workers rotate) only says which queue goes first."""
    on = {s: insert_on_shard(conn, s) for s in (2, 5)}
    assert claim(conn, 1, start_shard=5)[0]["id"] == on[2]  # the older job, wherever the claim starts
    assert claim(conn, 1, start_shard=0)[0]["id"] == on[5]


def test_a_claim_collects_jobs_from_every_shard(conn: Conn) -> None:
    ids = {insert_on_shard(conn, s) for s in range(8)}
    assert {r["id"] for r in claim(conn, 100, start_shard=3)} == ids


def test_one_pass_claims_in_priority_order_across_shards(conn: Conn, now: datetime) -> None:
    low = insert_on_shard(conn, 1, priority=0, run_at=now - timedelta(hours=1))
    high = insert_on_shard(conn, 6, priority=9, run_at=now)
    mid_old = insert_on_shard(conn, 3, priority=5, run_at=now - timedelta(minutes=5))
    mid_new = insert_on_shard(conn, 0, priority=5, run_at=now)
    order = [claim(conn, 1, start_shard=None)[0]["id"] for _ in range(4)]
    assert order == [high, mid_old, mid_new, low]
    assert claim(conn, 10, start_shard=None) == []


def test_priority_is_strict_across_shards_whichever_shard_a_claim_starts_at(conn: Conn, now: datetime) -> None:
    high = enqueue_many(conn, ["t"] * 200, priorities=[10] * 200)
    low = insert_on_shard(conn, 3, priority=0, run_at=now - timedelta(hours=1))  # older, on one shard
    order: list[int] = []
    for i in itertools.count():
        got = claim(conn, 7, start_shard=i % 8)
        if not got:
            break
        order += [r["id"] for r in got]
    assert sorted(order) == sorted([*high, low])
    assert order[-1] == low  # number 201 of 201
    # one batch larger than a shard's share: every priority-10 job before the priority-0 one
    more = enqueue_many(conn, ["t"] * 40, priorities=[10] * 40)
    lower = insert_on_shard(conn, 5, priority=0)
    assert {r["id"] for r in claim(conn, 40, start_shard=5)} == set(more)
    assert [r["id"] for r in claim(conn, 40, start_shard=5)] == [lower]


def test_a_batch_comes_back_in_claim_order(conn: Conn, now: datetime) -> None:
    ids = [insert_on_shard(conn, s % 8, priority=s % 3, run_at=now - timedelta(seconds=s)) for s in range(24)]
    order = sorted(ids, key=lambda i: (-((i - ids[0]) % 3), -((i - ids[0]) % 24), i))
    assert [r["id"] for r in claim(conn, 24, start_shard=4)] == order


def test_one_pass_leases_each_job_once_with_its_shard(conn: Conn) -> None:
    ids = {insert_on_shard(conn, s): s for s in range(8)}
    rows = claim(conn, 5, start_shard=None) + claim(conn, 5, start_shard=None)
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert all(ids[r["id"]] == r["shard"] for r in rows)
    assert len({r["lease_token"] for r in rows}) == 8


def test_a_worker_claims_only_jobs_whose_labels_it_offers(conn: Conn) -> None:
    plain = enqueue(conn)
    gpu = enqueue(conn, labels=["gpu"])
    gpu_eu = enqueue(conn, labels=["gpu", "eu"])
    assert {r["id"] for r in claim(conn, worker="cpu")} == {plain}
    assert {r["id"] for r in claim(conn, worker="gpu", labels=["gpu"])} == {gpu}
    assert {r["id"] for r in claim(conn, worker="big", labels=["eu", "gpu", "ssd"])} == {gpu_eu}


def test_paused_queues_are_skipped_until_resumed(conn: Conn) -> None:
    paused = enqueue(conn, queue="paused")
    live = enqueue(conn, queue="live")
    conn.execute("SELECT pgsched.pause_queue('paused')")
    assert {r["id"] for r in claim(conn, queues=["paused", "live"])} == {live}
    assert claim(conn, queues=["paused"]) == []
    assert enqueue(conn, queue="paused") > 0  # enqueueing still works
    conn.execute("SELECT pgsched.resume_queue('paused')")
    assert paused in {r["id"] for r in claim(conn, queues=["paused"])}


@pytest.mark.parametrize(
    ("n", "lease"),
    [
        (0, timedelta(seconds=30)),
        (1, timedelta(0)),
        (1, -timedelta(seconds=1)),
        # shorter than any heartbeat could renew: refused, not a job lost at once
        (1, timedelta(milliseconds=999)),
    ],
)
def test_claim_refuses_a_useless_request(conn: Conn, n: int, lease: timedelta) -> None:
    enqueue(conn)
    with refused("22023"):
        claim(conn, n, lease=lease)
    row = conn.execute("SELECT state FROM pgsched.jobs").fetchone()
    assert row == {"state": "available"}


def claim_starting(
    conn: Conn, n: int, starts: int, now: datetime, start_tasks: list[str] | None = None
) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM pgsched.claim('w1', ARRAY['default'], %s, interval '30 seconds', '{}', 0, %s,"
        " starts => %s, start_tasks => %s)",
        [n, now, starts, start_tasks],
    ).fetchall()


def test_claim_starts_the_first_jobs_it_is_asked_to(conn: Conn, now: datetime) -> None:
    """starts => k: the first k jobs in dispatch order take a free handler slot at once, so the claim records
    their start itself (started_at, and the deadline of a job with a time limit): no start() statement and no
    second row version for them. The others wait for a slot, started_at NULL, as from a plain claim."""
    first = insert_on_shard(conn, 0, priority=3, timeout=timedelta(seconds=40))
    second = insert_on_shard(conn, 4, priority=2)
    third = insert_on_shard(conn, 0, priority=1)
    rows = {r["id"]: r for r in claim_starting(conn, 3, 2, now)}
    assert (rows[first]["started_at"], rows[first]["timeout"]) == (now, timedelta(seconds=40))
    assert (rows[second]["started_at"], rows[second]["timeout"]) == (now, None)
    assert (rows[third]["started_at"], rows[third]["timeout"]) == (None, None)
    stored = {i: job(conn, i) for i in (first, second, third)}
    assert stored[first]["started_at"] == now
    assert stored[first]["deadline_at"] == now + timedelta(seconds=40)
    assert stored[second]["started_at"] == now
    assert stored[third]["started_at"] is None
    assert stored[third]["deadline_at"] is None


def test_a_job_started_by_the_live_clock_gets_its_time_limit_exactly(conn: Conn) -> None:
    """Without p_now the claim stamps the clock when it writes the row: its start and its deadline are read from
    one clock reading, so the limit it reports (deadline - start) is the job's own to the microsecond, as the
    worker enforces and logs it."""
    conn.execute(
        "SELECT pgsched.enqueue_many(array_fill('t'::text, ARRAY[200]), timeouts => array_fill(interval '3 seconds',"
        " ARRAY[200]))"
    )
    rows = conn.execute(
        "SELECT * FROM pgsched.claim('w1', ARRAY['default'], 200, interval '30 seconds', starts => 200)"
    ).fetchall()
    assert len(rows) == 200
    assert {r["timeout"] for r in rows} == {timedelta(seconds=3)}
    stored = conn.execute("SELECT DISTINCT deadline_at - started_at AS limit FROM pgsched.jobs").fetchall()
    assert stored == [{"limit": timedelta(seconds=3)}]


def test_claim_starts_only_the_tasks_it_is_told_and_never_a_job_whose_cancel_was_requested(
    conn: Conn, now: datetime
) -> None:
    known = enqueue(conn, "known")
    unknown = enqueue(conn, "unknown")
    cancelling = enqueue(conn, "known")
    conn.execute("UPDATE pgsched.jobs SET cancel_requested_at = now() WHERE id = %s", (cancelling,))
    rows = {r["id"]: r["started_at"] for r in claim_starting(conn, 3, 3, now, ["known"])}
    assert rows == {known: now, unknown: None, cancelling: None}


def test_a_claim_without_starts_starts_nothing(conn: Conn, now: datetime) -> None:
    enqueue_many(conn, ["t"] * 3)
    assert [r["started_at"] for r in claim_starting(conn, 3, 0, now)] == [None, None, None]


def test_the_workers_claim_query_reads_back_as_claimed_jobs(conn: Conn) -> None:
    """The worker's claim_and_start reads its rows by position (no dict per row): the query's columns must be
    ClaimedJob's fields in order, then started and timeout."""
    started = enqueue(conn, "t", {"a": 1}, timeout=timedelta(seconds=7))
    waiting = enqueue(conn, "t")
    params = {"worker": "w1", "queues": ["default"], "n": 2, "lease": timedelta(seconds=30), "labels": []}
    params.update(start_shard=None, at_once=1, tasks=["t"])
    with conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries.CLAIM_AND_START, params).fetchall()
        names = tuple(c.name for c in cur.description or ())
    assert names == (*CLAIMED_FIELDS, "started", "timeout")
    claimed = [claimed_row(row) for row in rows]
    # its fields filled in place: the same jobs as the dataclass's own constructor makes
    assert [job for job, _, _ in claimed] == [
        ClaimedJob(**dict(zip(CLAIMED_FIELDS, row, strict=False))) for row in rows
    ]
    assert [(job.id, job.args, job.task, outcome, timeout) for job, outcome, timeout in claimed] == [
        (started, {"a": 1}, "t", "started", 7.0),
        (waiting, {}, "t", None, None),
    ]
    assert all(job.lease_token > 0 and job.lease_expires_at is not None for job, _, _ in claimed)
